// Context parallelism's kinds and the ring's token ownership (ARCHITECTURE.md "Who holds
// which tokens": rank r holds chunks r and 2P-1-r of 2P instead of chunk r of P). The ring
// and the all-to-all are the routes routes/ring_route.* and routes/all_to_all_route.*.
#pragma once
#include <array>
#include <cstdint>
#include <string>

namespace driftless::layers {

enum class ContextParallel { none, ring, a2a };

// "ring" or "a2a" (distributed.context_parallel.kind) with size > 1; none otherwise.
ContextParallel context_parallel_kind(const std::string& kind, int64_t size);

// The ring's load-balanced causal split: of a micro-sequence's 2P chunks, rank r holds
// chunks r and 2P-1-r (the one place this pairing is written).
inline std::array<int64_t, 2> ring_chunks(int64_t rank, int64_t P) {
  return {rank, 2 * P - 1 - rank};
}
// The rank holding chunk b of 2P.
inline int64_t ring_owner(int64_t chunk, int64_t P) {
  return chunk < P ? chunk : 2 * P - 1 - chunk;
}

}  // namespace driftless::layers
