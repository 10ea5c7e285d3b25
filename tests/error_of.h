// The message of the driftless::Error a call throws, for tests of refusals
// (ARCHITECTURE.md "Errors": library code throws driftless::Error).
#pragma once
#include <functional>
#include <string>

#include "engine/core/error.h"

namespace driftless::testing {

// e.what() of the driftless::Error f throws, or `none` when it throws none.
inline std::string error_of(const std::function<void()>& f, const std::string& none = "") {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return none;
}

}  // namespace driftless::testing
