// Out-of-line thrower so the check macros stay small at every call site.
#include "engine/core/error.h"

namespace driftless::detail {

void throw_error(const char* op, const std::string& message) {
  throw Error(std::string("[") + op + "] " + message);
}

}  // namespace driftless::detail
