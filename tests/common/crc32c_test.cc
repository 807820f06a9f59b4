#include "server/common/crc32c.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace attnserve {
namespace {

TEST(Crc32c, MatchesTheStandardCheckValue) {
  // The CRC-32C check value (RFC 3720, "123456789").
  EXPECT_EQ(Crc32c(0, "123456789", 9), 0xE3069283u);
  EXPECT_EQ(Crc32cPortable(0, "123456789", 9), 0xE3069283u);
  EXPECT_EQ(Crc32c(0, "", 0), 0u);
}

TEST(Crc32c, RfcTestVectors) {
  // RFC 3720 B.4: 32 bytes of zeros and 32 bytes of ones.
  std::vector<uint8_t> zeros(32, 0), ones(32, 0xFF);
  EXPECT_EQ(Crc32c(0, zeros.data(), zeros.size()), 0x8A9136AAu);
  EXPECT_EQ(Crc32c(0, ones.data(), ones.size()), 0x62A8AB43u);
}

TEST(Crc32c, FastPathAgreesWithPortableAtEveryLengthAndAlignment) {
  std::mt19937 rng(7);
  std::vector<uint8_t> data(4096 + 16);
  for (auto& b : data) b = uint8_t(rng());
  for (size_t offset = 0; offset < 8; ++offset) {
    for (size_t n : {0, 1, 7, 8, 9, 15, 16, 63, 64, 65, 1000, 4096}) {
      ASSERT_EQ(Crc32c(0, data.data() + offset, n), Crc32cPortable(0, data.data() + offset, n))
          << "offset " << offset << " length " << n;
    }
  }
}

TEST(Crc32c, ExtendsAcrossPieces) {
  const std::string text = "In the beginning God created the heaven and the earth.";
  const uint32_t whole = Crc32c(0, text.data(), text.size());
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    EXPECT_EQ(Crc32c(Crc32c(0, text.data(), cut), text.data() + cut, text.size() - cut), whole);
  }
}

}  // namespace
}  // namespace attnserve
