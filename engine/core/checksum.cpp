// checksum64 (checksum.h).
#include "engine/core/checksum.h"

#include <cstdio>
#include <cstring>

#include "engine/core/random.h"

namespace driftless {

uint64_t checksum64(const void* data, size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t h = random::splitmix64(bytes);
  size_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    uint64_t w = 0;
    for (int b = 0; b < 8; ++b) w |= uint64_t(p[i + size_t(b)]) << (8 * b);
    h = random::splitmix64(h ^ w);
  }
  uint64_t tail = 0;
  for (size_t b = 0; i + b < bytes; ++b) tail |= uint64_t(p[i + b]) << (8 * b);
  return random::splitmix64(h ^ tail);
}

std::string checksum_hex(uint64_t checksum) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(checksum));
  return buf;
}

}  // namespace driftless
