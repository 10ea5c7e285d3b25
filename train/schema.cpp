// Strict reading of a YAML mapping through a schema, field dumping and the Markdown
// reference (schema.h). Every problem of a node is collected with its key path.
#include "train/schema.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <sstream>

#include "engine/core/error.h"

namespace driftless::train {

namespace {

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1])});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string choices_str(const std::vector<std::string>& c) {
  std::string s;
  for (size_t i = 0; i < c.size(); ++i) s += (i ? ", " : "") + c[i];
  return s;
}

std::string number_text(double v) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, r.ptr);
}

// A node as YAML text: scalars as written, anything else in flow style.
std::string node_text(const YAML::Node& n) {
  if (n.IsScalar()) return n.as<std::string>();
  YAML::Emitter e;
  e << YAML::Flow << n;
  return e.c_str();
}

void unique_keys(const YAML::Node& node, const std::string& path, const std::string& where) {
  if (node.IsSequence()) {
    for (size_t i = 0; i < node.size(); ++i)
      unique_keys(node[i], path + "[" + std::to_string(i) + "]", where);
    return;
  }
  if (!node.IsMap()) return;
  std::map<std::string, int> line_of;
  for (const auto& kv : node) {
    const std::string key = kv.first.IsScalar() ? kv.first.Scalar() : node_text(kv.first);
    const std::string at = path.empty() ? key : path + "." + key;
    const int line = kv.first.Mark().line + 1;
    const auto [it, fresh] = line_of.emplace(key, line);
    DL_CHECK(fresh, "config",
             where << ": " << at << " is given twice (lines " << it->second << " and " << line
                   << "); YAML would keep one silently, remove the other");
    unique_keys(kv.second, at, where);
  }
}

}  // namespace

void check_unique_keys(const YAML::Node& node, const std::string& where) {
  unique_keys(node, "", where);
}

std::string node_excerpt(const YAML::Node& node) {
  const std::string text = node_text(node);
  return text.size() <= 120 ? text : text.substr(0, 120) + "...";
}

namespace {

// Leaves of a mapping by dotted path; a known field's node is a leaf whatever its kind (a
// list of records, a free mapping).
void flatten(const YAML::Node& node, const std::string& prefix, const std::set<std::string>& fields,
             std::map<std::string, YAML::Node>& out) {
  if (!prefix.empty() && (fields.count(prefix) || !node.IsMap() || node.size() == 0)) {
    out[prefix] = node;
    return;
  }
  if (!node.IsMap()) return;
  for (const auto& kv : node) {
    const std::string key = kv.first.as<std::string>();
    flatten(kv.second, prefix.empty() ? key : prefix + "." + key, fields, out);
  }
}

// Reads one scalar into a typed member; returns an error text or "".
template <class T>
std::string read_scalar(const YAML::Node& n, T& out) {
  if (!n.IsScalar()) return "expected a single value";
  try {
    if constexpr (std::is_same_v<T, int64_t>) {
      std::string s = n.as<std::string>();
      size_t pos = 0;
      long long v = std::stoll(s, &pos);
      if (pos != s.size()) return "expected an integer, got '" + s + "'";
      out = v;
    } else if constexpr (std::is_same_v<T, bool>) {
      out = n.as<bool>();
    } else {
      out = n.as<T>();
    }
  } catch (const std::exception&) {
    const char* what = std::is_same_v<T, bool>     ? "true or false"
                       : std::is_same_v<T, double> ? "a number"
                                                   : "an integer";
    return std::string("expected ") + what + ", got '" + n.as<std::string>() + "'";
  }
  return "";
}

std::string check_range(const Field& f, double v) {
  if (std::isnan(v)) return "expected a number, got NaN";
  if (f.min == 0 && f.max == 0) return "";
  if (!(v >= f.min && v <= f.max)) {
    std::ostringstream os;
    os << "value " << v << " out of range [" << f.min << ", " << f.max << "]";
    return os.str();
  }
  return "";
}

std::string check_choice(const std::vector<std::string>& choices, const std::string& v) {
  if (choices.empty() || std::find(choices.begin(), choices.end(), v) != choices.end()) return "";
  return "'" + v + "' is not one of: " + choices_str(choices);
}

// Reads one field; returns an error text or "" (records report their own errors, with
// their paths, into `errors`).
std::string read_field(const Field& f, FieldRef ref, const YAML::Node& n,
                       std::vector<std::string>& errors, const std::string& where) {
  return std::visit(
      [&](auto p) -> std::string {
        using P = decltype(p);
        if constexpr (std::is_same_v<P, const RecordList*>) {
          if (n.IsNull()) return "";
          if (!n.IsSequence()) return "expected a list of mappings";
          size_t i = 0;
          for (const auto& item : n) {
            const std::string at = where + f.path + "[" + std::to_string(i++) + "]";
            if (!item.IsMap()) {
              errors.push_back(at + ": expected a mapping of keys");
              continue;
            }
            read_schema(item, p->add(), errors, at + ".");
          }
          return "";
        } else if constexpr (std::is_same_v<P, EnumRef>) {
          std::string v;
          std::string err = read_scalar(n, v);
          if (err.empty()) err = check_choice(*p.names, v);
          if (!err.empty()) return err;
          p.set(int(std::find(p.names->begin(), p.names->end(), v) - p.names->begin()));
          return "";
        } else {
          using T = std::remove_pointer_t<P>;
          if constexpr (std::is_same_v<T, std::map<std::string, std::string>>) {
            if (n.IsNull()) return "";
            if (!n.IsMap()) return "expected a mapping of keys";
            T values;
            for (const auto& kv : n) values[kv.first.as<std::string>()] = node_text(kv.second);
            *p = values;
            return "";
          } else if constexpr (std::is_same_v<T, std::vector<int64_t>> ||
                               std::is_same_v<T, std::vector<std::string>>) {
            if (!n.IsSequence()) return "expected a list";
            T values;
            for (const auto& item : n) {
              typename T::value_type v{};
              std::string err = read_scalar(item, v);
              if (err.empty()) {
                if constexpr (std::is_same_v<T, std::vector<int64_t>>)
                  err = check_range(f, double(v));
                else
                  err = check_choice(f.choices, v);
              }
              if (!err.empty()) return err;
              values.push_back(v);
            }
            *p = values;
            return "";
          } else {
            T v{};
            std::string err = read_scalar(n, v);
            if (!err.empty()) return err;
            if constexpr (std::is_same_v<T, std::string>)
              err = check_choice(f.choices, v);
            else if constexpr (!std::is_same_v<T, bool>)
              err = check_range(f, double(v));
            if (!err.empty()) return err;
            *p = v;
            return "";
          }
        }
      },
      ref);
}

// Doubles as their shortest round-trip text (0.0006, not 0.00059999999999999995).
template <class T>
YAML::Node to_node(const T& v) {
  if constexpr (std::is_same_v<T, double>) {
    return YAML::Node(number_text(v));
  } else {
    return YAML::Node(v);
  }
}

}  // namespace

std::set<std::string> read_schema(const YAML::Node& node, const SchemaWalk& walk,
                                  std::vector<std::string>& errors, const std::string& where) {
  std::set<std::string> known;
  walk([&](const Field& f, FieldRef) { known.insert(f.path); });
  std::map<std::string, YAML::Node> leaves;
  flatten(node, "", known, leaves);
  std::set<std::string> given;
  walk([&](const Field& f, FieldRef ref) {
    auto it = leaves.find(f.path);
    if (it == leaves.end()) return;
    given.insert(f.path);
    const std::string err = read_field(f, ref, it->second, errors, where);
    if (!err.empty()) errors.push_back(where + f.path + ": " + err);
    leaves.erase(it);
  });
  for (const auto& [path, leaf] : leaves) {
    const bool is_section = std::any_of(known.begin(), known.end(), [&](const std::string& k) {
      return k.rfind(path + ".", 0) == 0;
    });
    if (is_section) {
      errors.push_back(where + path + ": expected a mapping of keys");
      continue;
    }
    std::string best;
    size_t best_d = 4;
    for (const auto& k : known) {
      const size_t d = edit_distance(path, k);
      if (d < best_d) best_d = d, best = k;
    }
    errors.push_back(where + path + ": unknown key" +
                     (best.empty() ? "" : " (did you mean " + where + best + "?)"));
  }
  return given;
}

YAML::Node field_node(FieldRef ref) {
  return std::visit(
      [](auto p) -> YAML::Node {
        using P = decltype(p);
        if constexpr (std::is_same_v<P, const RecordList*>) {
          return YAML::Node(YAML::NodeType::Sequence);
        } else if constexpr (std::is_same_v<P, EnumRef>) {
          return YAML::Node((*p.names)[size_t(p.get())]);
        } else {
          YAML::Node n = to_node(*p);
          if constexpr (!std::is_same_v<std::remove_pointer_t<P>, int64_t> &&
                        !std::is_same_v<std::remove_pointer_t<P>, double> &&
                        !std::is_same_v<std::remove_pointer_t<P>, bool> &&
                        !std::is_same_v<std::remove_pointer_t<P>, std::string>)
            n.SetStyle(YAML::EmitterStyle::Flow);
          return n;
        }
      },
      ref);
}

namespace {

void reference_rows(const SchemaWalk& walk, const std::string& prefix, std::ostringstream& os) {
  walk([&](const Field& f, FieldRef ref) {
    const std::string path = prefix + f.path;
    if (const auto* list = std::get_if<const RecordList*>(&ref)) {
      os << "| `" << path << "` | list | `[]` | | " << f.help << " |\n";
      reference_rows((*list)->prototype, path + "[].", os);
      return;
    }
    std::string type;
    std::vector<std::string> choices = f.choices;
    std::visit(
        [&](auto p) {
          using P = decltype(p);
          if constexpr (std::is_same_v<P, EnumRef>) {
            type = "string";
            choices = *p.names;
          } else if constexpr (!std::is_same_v<P, const RecordList*>) {
            using T = std::remove_pointer_t<P>;
            if constexpr (std::is_same_v<T, int64_t>)
              type = "int";
            else if constexpr (std::is_same_v<T, double>)
              type = "float";
            else if constexpr (std::is_same_v<T, bool>)
              type = "bool";
            else if constexpr (std::is_same_v<T, std::string>)
              type = "string";
            else if constexpr (std::is_same_v<T, std::vector<int64_t>>)
              type = "list of int";
            else if constexpr (std::is_same_v<T, std::vector<std::string>>)
              type = "list of string";
            else
              type = "mapping";
          }
        },
        ref);
    YAML::Emitter e;
    e << YAML::Flow << field_node(ref);
    const std::string def = e.c_str();
    std::ostringstream allowed;
    if (!choices.empty())
      allowed << choices_str(choices);
    else if (f.max >= 1e15)
      allowed << ">= " << number_text(f.min);
    else if (f.min != 0 || f.max != 0)
      allowed << number_text(f.min) << " .. " << number_text(f.max);
    os << "| `" << path << "` | " << type << " | `" << (def.empty() ? "\"\"" : def) << "` | "
       << allowed.str() << " | " << f.help << " |\n";
  });
}

}  // namespace

std::string schema_reference(const SchemaWalk& walk) {
  std::ostringstream os;
  os << "| key | type | default | allowed | meaning |\n| --- | --- | --- | --- | --- |\n";
  reference_rows(walk, "", os);
  return os.str();
}

}  // namespace driftless::train
