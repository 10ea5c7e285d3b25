// The schema machinery behind every YAML config of driftless (the run config, config.h, and
// the regression config, regress.h): a Field names one key with its range (numbers),
// allowed values (strings and enums) and help; a walk visits each field of a struct with a
// pointer to its member. Strict reading, dumping and the Markdown reference are written
// once, here, for every schema.
#pragma once
#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <variant>
#include <vector>

namespace driftless::train {

struct Field {
  const char* path;  // dotted: nested mappings (model.n_layer)
  const char* help;
  double min = 0;
  double max = 0;  // min == max == 0: no range
  std::vector<std::string> choices = {};
};

// The names a config writes for an enum's values: names[i] is values[i]. Values left out
// are refused by the schema (ContextParallel::none is size 1, not a kind).
template <class E>
struct EnumNames {
  std::vector<std::string> names;
  std::vector<E> values;
  const std::string& name(E v) const {
    for (size_t i = 0; i < values.size(); ++i)
      if (values[i] == v) return names[i];
    static const std::string unnamed = "?";
    return unnamed;
  }
};

// An enum member, read and written by its name (index into names).
struct EnumRef {
  std::function<int()> get;
  std::function<void(int)> set;
  const std::vector<std::string>* names;
};
template <class E>
EnumRef enum_ref(E& e, const EnumNames<E>& table) {
  return {[&e, &table] {
            for (size_t i = 0; i < table.values.size(); ++i)
              if (table.values[i] == e) return int(i);
            return 0;
          },
          [&e, &table](int i) { e = table.values[size_t(i)]; }, &table.names};
}

struct RecordList;
using FieldRef = std::variant<int64_t*, double*, bool*, std::string*, std::vector<int64_t>*,
                              std::vector<std::string>*, std::map<std::string, std::string>*,
                              EnumRef, const RecordList*>;
using FieldVisitor = std::function<void(const Field&, FieldRef)>;
// Visits every field of one struct instance.
using SchemaWalk = std::function<void(const FieldVisitor&)>;

// A list of records, each a mapping with fields of its own (layouts: [{name: a}, ...]); a
// std::map<string, string> field takes free keys, each value kept as YAML text.
struct RecordList {
  std::function<SchemaWalk()> add;  // appends a default record; the walk over its fields
  SchemaWalk prototype;             // a walk over a default record's fields (the reference)
};

// The RecordList of `list`, whose records' fields `fields(record, visitor)` visits.
template <class R, class F>
RecordList records(std::vector<R>& list, F fields) {
  RecordList r;
  r.add = [&list, fields] {
    list.emplace_back();
    const size_t i = list.size() - 1;
    return SchemaWalk([&list, i, fields](const FieldVisitor& v) { fields(list[i], v); });
  };
  r.prototype = [fields](const FieldVisitor& v) {
    R record;
    fields(record, v);
  };
  return r;
}

// Reads the mapping `node` into the fields of `walk` (paths relative to the node). Every
// unknown key (with the closest known one suggested), wrong type and out-of-range value is
// appended to `errors` as "<where><path>: what"; nothing stops at the first. Returns the
// paths the node gave.
std::set<std::string> read_schema(const YAML::Node& node, const SchemaWalk& walk,
                                  std::vector<std::string>& errors, const std::string& where = "");
// Throws driftless::Error naming the key path and both lines when a mapping anywhere in
// `node` gives a key twice (YAML would keep one silently); `where` names the document.
void check_unique_keys(const YAML::Node& node, const std::string& where);
// A node as short YAML text for messages (cut to 120 characters).
std::string node_excerpt(const YAML::Node& node);
// A field's value as a YAML node (numbers in their shortest round-trip text).
YAML::Node field_node(FieldRef ref);
// A Markdown table of every field: path, type, default, allowed values, help; a record
// list's fields are listed as `list[].key`.
std::string schema_reference(const SchemaWalk& walk);

}  // namespace driftless::train
