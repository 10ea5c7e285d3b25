// Context parallelism's kinds and the ring's token ownership (ARCHITECTURE.md "Who holds
// which tokens": rank r holds chunks r and 2P-1-r of 2P instead of chunk r of P; the hybrid
// splits each ring chunk over a group). The routes are routes/ring_route.*,
// routes/all_to_all_route.* and routes/hybrid_route.*.
#pragma once
#include <array>
#include <cstdint>
#include <string>

namespace driftless::layers {

// hybrid: all-to-all inside groups of G consecutive ranks, the ring across the P / G groups.
enum class ContextParallel { none, ring, a2a, hybrid };

// The ring's load-balanced causal split: of a micro-sequence's 2P chunks, rank r holds
// chunks r and 2P-1-r (the one place this pairing is written).
inline std::array<int64_t, 2> ring_chunks(int64_t rank, int64_t P) {
  return {rank, 2 * P - 1 - rank};
}
// The rank holding chunk b of 2P.
inline int64_t ring_owner(int64_t chunk, int64_t P) {
  return chunk < P ? chunk : 2 * P - 1 - chunk;
}

// The hybrid's split (G ranks per group, P / G groups): the group of position p holds the
// ring's chunks p / G and 2 (P / G) - 1 - p / G of 2 (P / G), and position p holds piece p % G
// of each, i.e. chunks c G + p % G of the micro-sequence's 2P equal pieces.
inline std::array<int64_t, 2> hybrid_chunks(int64_t position, int64_t P, int64_t G) {
  const auto ring = ring_chunks(position / G, P / G);
  return {ring[0] * G + position % G, ring[1] * G + position % G};
}

}  // namespace driftless::layers
