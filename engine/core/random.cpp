// splitmix64-based counter RNG (see random.h; hash and uniform01 are inline there).
#include "engine/core/random.h"

#include <cmath>

namespace driftless::random {

double normal(uint64_t seed, uint64_t counter) {
  double u1 = uniform01(seed, 2 * counter);
  double u2 = uniform01(seed, 2 * counter + 1);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

uint64_t derive(uint64_t seed, uint64_t stream) {
  return hash(seed ^ 0x5bd1e995ull, stream);
}

}  // namespace driftless::random
