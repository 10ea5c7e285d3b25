// CUDA primitives when driftless is built without CUDA: every call explains the build.
#include <limits>

#include "engine/core/device_ops.h"

namespace driftless::cuda {

namespace {
[[noreturn]] void no_cuda(const char* op) {
  DL_FAIL(op, "this driftless was built without CUDA (configure with -DDRIFTLESS_CUDA=ON "
              "on a machine with nvcc)");
}
}  // namespace

bool built_with_cuda() { return false; }
int device_count() { return 0; }
std::string device_name() { return ""; }
Allocator& allocator() { no_cuda("cuda.alloc"); }
void copy(const Tensor&, const Tensor&) { no_cuda("cuda.copy"); }
void fill(const Tensor&, double) { no_cuda("cuda.fill"); }
void add_(const Tensor&, const Tensor&) { no_cuda("cuda.add_"); }
bool add_units(const Tensor&, const Tensor&, const Tensor&) { no_cuda("cuda.add_units"); }
void synchronize() {}
MemoryStats memory_stats() { return {}; }
void reset_peak_memory() {}
void empty_cache() {}
double energy_joules(std::string* why) {
  if (why) *why = "built without CUDA";
  return std::numeric_limits<double>::quiet_NaN();
}

}  // namespace driftless::cuda
