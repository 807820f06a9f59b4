// CRC-32 (IEEE 802.3, the zlib polynomial), for checksumming files we write.
#pragma once

#include <cstddef>
#include <cstdint>

namespace attnserve {

// Extends `crc` (start with 0) over `size` bytes at `data`.
uint32_t Crc32(uint32_t crc, const void* data, size_t size);

}  // namespace attnserve
