// The environment switches of driftless: every variable it reads is DRIFTLESS_<NAME>
// (docs/building.md lists them), and this is the one place that reads them. Set and empty
// count as unset.
#pragma once
#include <string>

namespace driftless {

// The value of `name`, or "" when unset.
std::string env_value(const char* name);
// Whether `name` is set to a non-empty value.
bool env_set(const char* name);

}  // namespace driftless
