// Opening a file named by a user, a config or a directory listing to read it: only a regular
// file is opened. A FIFO, a device or a directory is refused with an error naming it,
// never blocked on (open with O_NONBLOCK, then fstat the descriptor), so a hostile name
// cannot hang a run that holds its run directory's lock (docs/guarantees.md).
#pragma once
#include <cstddef>
#include <string>

namespace driftless {

// A read-only descriptor (O_CLOEXEC) of `path`, which must be a regular file (symbolic
// links are followed). Throws "[component] expected a regular file, got PATH (a FIFO)" or
// "... cannot open PATH: reason". The caller closes it.
int open_regular_file(const std::string& path, const char* component);

// The whole contents of the regular file `path`; larger than max_bytes is an error naming it.
std::string read_regular_file(const std::string& path, const char* component,
                              size_t max_bytes = size_t(1) << 30);

// What kind of file `path` is, in words ("a FIFO", "a directory"...), for messages; "" for a
// regular file or a path that does not exist.
std::string non_regular_kind(const std::string& path);

}  // namespace driftless
