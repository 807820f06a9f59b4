// CRC-32C (Castagnoli, the iSCSI polynomial), the checksum of session snapshots.
// Crc32c uses the SSE4.2 crc32 instruction where the CPU has it; Crc32cPortable is the
// table-driven reference it is tested against (tests/common/crc32c_test.cc).
#pragma once

#include <cstddef>
#include <cstdint>

namespace attnserve {

// Extends `crc` (start with 0) over `size` bytes at `data`; Crc32c(0, "123456789", 9)
// is 0xE3069283.
uint32_t Crc32c(uint32_t crc, const void* data, size_t size);

// The same value, one byte at a time through a table; for tests and CPUs without SSE4.2.
uint32_t Crc32cPortable(uint32_t crc, const void* data, size_t size);

}  // namespace attnserve
