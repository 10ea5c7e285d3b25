// A fast 64-bit checksum of bytes (splitmix64 over 8-byte little-endian words), for
// telling a damaged file from an intact one: checkpoints store one per tensor. Not
// cryptographic; the same bytes give the same value on every machine.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace driftless {

uint64_t checksum64(const void* data, size_t bytes);
// 16 lower-case hex digits.
std::string checksum_hex(uint64_t checksum);

}  // namespace driftless
