// The context-parallel kinds (context_parallel.h); the ring and all-to-all themselves are
// in routes/ring_route.cpp and routes/all_to_all_route.cpp.
#include "layers/attention/context_parallel.h"

#include "engine/core/error.h"

namespace driftless::layers {

namespace {
constexpr const char* kOp = "context_parallel";
}  // namespace

ContextParallel context_parallel_kind(const std::string& kind, int64_t size) {
  DL_CHECK(kind == "ring" || kind == "a2a" || kind == "hybrid", kOp,
           "kind must be ring, a2a or hybrid, got '" << kind << "'");
  if (size <= 1) return ContextParallel::none;
  if (kind == "hybrid") return ContextParallel::hybrid;
  return kind == "a2a" ? ContextParallel::a2a : ContextParallel::ring;
}

}  // namespace driftless::layers
