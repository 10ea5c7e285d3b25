// splitmix64-based counter RNG (see random.h).
#include "engine/core/random.h"

#include <cmath>

namespace driftless::random {

namespace {
uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
}  // namespace

uint64_t hash(uint64_t seed, uint64_t counter) { return splitmix64(splitmix64(seed) ^ counter); }

double uniform01(uint64_t seed, uint64_t counter) {
  // 53 random bits, shifted by half an ulp so the result is never 0 or 1.
  return (double(hash(seed, counter) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

double normal(uint64_t seed, uint64_t counter) {
  double u1 = uniform01(seed, 2 * counter);
  double u2 = uniform01(seed, 2 * counter + 1);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

uint64_t derive(uint64_t seed, uint64_t stream) { return hash(seed ^ 0x5bd1e995ull, stream); }

}  // namespace driftless::random
