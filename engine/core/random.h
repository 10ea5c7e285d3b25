// Counter-based random numbers: element i of a fill depends only on (seed, i), so every
// machine, thread count and device produces the same tensor. splitmix64 hashing; normals
// by Box-Muller on two hashed uniforms.
#pragma once
#include <cstdint>

namespace driftless::random {

uint64_t hash(uint64_t seed, uint64_t counter);
// Uniform in (0, 1), never exactly 0 or 1.
double uniform01(uint64_t seed, uint64_t counter);
double normal(uint64_t seed, uint64_t counter);
// Derives an independent stream seed, e.g. per layer or per step.
uint64_t derive(uint64_t seed, uint64_t stream);

}  // namespace driftless::random
