// Internal: the schema walker behind config.h. A Field names one YAML key with its range
// (numbers), allowed values (strings) and help; FieldRef points at the struct member.
#pragma once
#include <functional>
#include <string>
#include <variant>
#include <vector>

#include "engine/train/config.h"

namespace driftless::train {

struct Field {
  const char* path;
  const char* help;
  double min = 0;
  double max = 0;  // min == max == 0: no range
  std::vector<std::string> choices = {};
};

using FieldRef = std::variant<int64_t*, double*, bool*, std::string*, std::vector<int64_t>*,
                              std::vector<std::string>*>;
using FieldVisitor = std::function<void(const Field&, FieldRef)>;

void visit_schema(Config& config, const FieldVisitor& visitor);

}  // namespace driftless::train
