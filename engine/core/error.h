// driftless::Error and the check macros every library uses (ARCHITECTURE.md "Errors").
// Messages read "[op] what was expected, what was got", with shapes and indices.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace driftless {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

namespace detail {
[[noreturn]] void throw_error(const char* op, const std::string& message);
}  // namespace detail

}  // namespace driftless

// DL_FAIL("matmul", "last dim of a (" << k << ") must match ...") throws "[matmul] ...".
#define DL_FAIL(op, stream_expr)                                   \
  do {                                                             \
    std::ostringstream dl_fail_stream_;                            \
    dl_fail_stream_ << stream_expr;                                \
    ::driftless::detail::throw_error((op), dl_fail_stream_.str()); \
  } while (0)

// DL_CHECK(cond, "op", message stream): throws driftless::Error when cond is false.
#define DL_CHECK(cond, op, stream_expr)  \
  do {                                   \
    if (!(cond)) DL_FAIL(op, stream_expr); \
  } while (0)
