// Counter-based random numbers: element i of a fill depends only on (seed, i), so every
// machine, thread count and device produces the same tensor. splitmix64 hashing; normals
// by Box-Muller on two hashed uniforms. hash and uniform01 are inline and __host__
// __device__ so CUDA kernels (dropout) draw exactly the numbers the CPU draws.
#pragma once
#include <cstdint>

#if defined(__CUDACC__)
#define DL_HOST_DEVICE __host__ __device__
#else
#define DL_HOST_DEVICE
#endif

namespace driftless::random {

DL_HOST_DEVICE inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

DL_HOST_DEVICE inline uint64_t hash(uint64_t seed, uint64_t counter) {
  return splitmix64(splitmix64(seed) ^ counter);
}

// Uniform in (0, 1), never exactly 0 or 1: 53 random bits, shifted by half an ulp. Both
// operations are exact in double, so host and device agree bit for bit.
DL_HOST_DEVICE inline double uniform01(uint64_t seed, uint64_t counter) {
  return (double(hash(seed, counter) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

double normal(uint64_t seed, uint64_t counter);
// Derives an independent stream seed, e.g. per layer or per step.
uint64_t derive(uint64_t seed, uint64_t stream);

}  // namespace driftless::random
