// Environment switches (env.h).
#include "engine/core/env.h"

#include <cstdlib>

namespace driftless {

std::string env_value(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

bool env_set(const char* name) {
  return !env_value(name).empty();
}

}  // namespace driftless
