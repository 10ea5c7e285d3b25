// The device headers of the fast attention kernels, embedded in the binary at build time
// (cmake/embed_headers.cmake writes the definition), so the run-time compiled kernels are
// built from exactly the text nvcc compiled, with no source tree needed at run time.
#pragma once
#include <string>
#include <vector>

namespace driftless::layers::jit {

struct EmbeddedHeader {
  std::string name;  // the path the kernels #include it by, e.g. "layers/attention/mask.h"
  std::string text;
};

const std::vector<EmbeddedHeader>& kernel_headers();

}  // namespace driftless::layers::jit
