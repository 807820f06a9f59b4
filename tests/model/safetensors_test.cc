#include "server/model/safetensors.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

namespace attnserve::model {
namespace {

namespace fs = std::filesystem;

// A file made of `header` (JSON) and `buffer`, as the format lays it out.
std::string FileOf(const std::string& header, const std::string& buffer) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = char((uint64_t(header.size()) >> (8 * i)) & 0xff);
  return out + header + buffer;
}

std::string FailureOf(std::string_view bytes) {
  auto parsed = ParseSafetensors(bytes);
  EXPECT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kDataLoss);
  return std::string(parsed.status().message());
}

// Values every dtype holds exactly: small integers, halves, quarters.
const std::vector<float> kExact = {0.0f, 1.0f, -2.0f, 0.5f, -0.25f, 3.0f, 96.0f, -1.5f};

TEST(Safetensors, RoundTripsF32F16AndBf16) {
  const std::vector<float> b = {7.0f, -8.0f};
  for (SafetensorsDtype dtype :
       {SafetensorsDtype::kF32, SafetensorsDtype::kF16, SafetensorsDtype::kBF16}) {
    const SafetensorsTensor tensors[] = {{"a.weight", {2, 4}, kExact.data()},
                                         {"b", {2}, b.data()}};
    const std::string bytes = SerializeSafetensors(tensors, dtype, {{"format", "pt"}});
    auto file = ParseSafetensors(bytes);
    ASSERT_TRUE(file.ok()) << file.status();
    EXPECT_EQ(file->metadata.at("format"), "pt");
    ASSERT_EQ(file->tensors.size(), 2u);
    EXPECT_EQ(file->tensors[0].name, "a.weight");
    EXPECT_EQ(file->tensors[0].shape, (std::vector<int64_t>{2, 4}));
    EXPECT_EQ(file->tensors[0].dtype, dtype == SafetensorsDtype::kF32   ? "F32"
                                      : dtype == SafetensorsDtype::kF16 ? "F16"
                                                                        : "BF16");
    EXPECT_EQ(ToFloat32(file->tensors[0]).value(), kExact);
    EXPECT_EQ(ToFloat32(file->tensors[1]).value(), b);
    // The header is padded to 8 bytes, as the reference writer does.
    uint64_t n;
    std::memcpy(&n, bytes.data(), 8);
    EXPECT_EQ(n % 8, 0u);
  }
}

TEST(Safetensors, ConvertsHalfAndBf16BitPatterns) {
  EXPECT_EQ(HalfToFloat(0x3c00), 1.0f);
  EXPECT_EQ(HalfToFloat(0xc000), -2.0f);
  EXPECT_EQ(HalfToFloat(0x7bff), 65504.0f);
  EXPECT_EQ(HalfToFloat(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(HalfToFloat(0x03ff), std::ldexp(1023.0f, -24));  // largest subnormal
  EXPECT_EQ(HalfToFloat(0x7c00), std::numeric_limits<float>::infinity());
  EXPECT_EQ(HalfToFloat(0xfc00), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(HalfToFloat(0x7e00)));
  EXPECT_TRUE(std::signbit(HalfToFloat(0x8000)));
  EXPECT_EQ(Bf16ToFloat(0x3f80), 1.0f);
  EXPECT_EQ(Bf16ToFloat(0xc2c0), -96.0f);
  // Every finite half round-trips through fp32.
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7c00) == 0x7c00) continue;
    EXPECT_EQ(FloatToHalf(HalfToFloat(uint16_t(h))), h) << h;
  }
  EXPECT_EQ(FloatToHalf(1e6f), 0x7c00);  // overflow: inf
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // tie: to even
  EXPECT_EQ(FloatToBf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);    // tie: to even
  EXPECT_EQ(FloatToBf16(1.0f + std::ldexp(3.0f, -9)), 0x3f81);    // above half: up
}

TEST(Safetensors, RefusesAHeaderLargerThanTheLimit) {
  std::string bytes(16, '\0');
  const uint64_t n = kMaxSafetensorsHeader + 1;
  std::memcpy(bytes.data(), &n, 8);
  EXPECT_NE(FailureOf(bytes).find("larger than the limit of 100000000"), std::string::npos);
  EXPECT_NE(FailureOf("abc").find("shorter than its 8-byte header length"), std::string::npos);
  std::string past(12, '\0');
  past[0] = 100;
  EXPECT_NE(FailureOf(past).find("runs past the end of the file"), std::string::npos);
}

TEST(Safetensors, RefusesInvalidJsonAndNonObjects) {
  EXPECT_NE(FailureOf(FileOf("{\"a\": ", "")).find("header is not valid JSON"),
            std::string::npos);
  EXPECT_NE(FailureOf(FileOf("[1, 2]", "")).find("header is not a JSON object"),
            std::string::npos);
}

TEST(Safetensors, RefusesOffsetsThatAreNotContiguousFromZero) {
  const std::string gap = FileOf(
      R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})", std::string(8, '\0'));
  EXPECT_NE(FailureOf(gap).find("tensor 'a': data_offsets begin at 4, expected 0"),
            std::string::npos);
  const std::string overlap = FileOf(
      R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
          "b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
      std::string(8, '\0'));
  EXPECT_NE(FailureOf(overlap).find("begin at 4, expected 8"), std::string::npos);
}

TEST(Safetensors, RefusesASizeThatDisagreesWithTheShape) {
  const std::string bytes = FileOf(
      R"({"a": {"dtype": "BF16", "shape": [3], "data_offsets": [0, 8]}})", std::string(8, '\0'));
  EXPECT_NE(FailureOf(bytes).find("tensor 'a': data_offsets span 8 bytes but shape [3] of BF16 "
                                  "needs 6"),
            std::string::npos);
}

TEST(Safetensors, RefusesBytesAfterTheLastTensorAndABufferTooShort) {
  const std::string trailing = FileOf(
      R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})", std::string(6, '\0'));
  EXPECT_NE(FailureOf(trailing).find("2 bytes after the last tensor"), std::string::npos);
  const std::string short_buffer = FileOf(
      R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})", std::string(4, '\0'));
  EXPECT_NE(FailureOf(short_buffer).find("past the buffer of 4 bytes"), std::string::npos);
}

TEST(Safetensors, RefusesAnUnknownDtypeAndConvertsOnlyFloats) {
  const std::string unknown = FileOf(
      R"({"a": {"dtype": "F7", "shape": [1], "data_offsets": [0, 1]}})", std::string(1, '\0'));
  EXPECT_NE(FailureOf(unknown).find("tensor 'a': unknown dtype 'F7'"), std::string::npos);
  // A known dtype lays out and validates; asking for its values as fp32 is refused.
  const std::string ints = FileOf(
      R"({"a": {"dtype": "I64", "shape": [1], "data_offsets": [0, 8]}})", std::string(8, '\0'));
  auto file = ParseSafetensors(ints);
  ASSERT_TRUE(file.ok()) << file.status();
  auto values = ToFloat32(file->tensors[0]);
  EXPECT_EQ(values.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(values.status().message().find("tensor 'a' has dtype I64; attnserve reads F32, F16 "
                                           "and BF16"),
            std::string::npos);
}

TEST(Safetensors, RefusesADuplicateNameAndMalformedEntries) {
  const std::string twice = FileOf(
      R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
          "a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
      std::string(8, '\0'));
  EXPECT_NE(FailureOf(twice).find("tensor 'a' appears twice"), std::string::npos);
  EXPECT_NE(FailureOf(FileOf(R"({"a": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 0]}})",
                             ""))
                .find("is not a list of sizes"),
            std::string::npos);
  EXPECT_NE(FailureOf(FileOf(R"({"a": {"dtype": "F32", "shape": [], "data_offsets": [0]}})", ""))
                .find("data_offsets is not [begin, end]"),
            std::string::npos);
  EXPECT_NE(FailureOf(FileOf(R"({"__metadata__": {"format": 1}})", ""))
                .find("__metadata__ value 'format' is not a string"),
            std::string::npos);
}

class SafetensorsDir : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("attnserve_safetensors_test_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  void Write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name, std::ios::binary) << text;
  }
  fs::path dir_;
};

TEST_F(SafetensorsDir, ReadsShardsThroughTheIndexWeightMap) {
  const std::vector<float> a = {1, 2, 3}, b = {4, 5};
  const SafetensorsTensor first[] = {{"a", {3}, a.data()}};
  const SafetensorsTensor second[] = {{"b", {1, 2}, b.data()}};
  ASSERT_TRUE(WriteSafetensors((dir_ / "model-00001-of-00002.safetensors").string(), first,
                               SafetensorsDtype::kF32)
                  .ok());
  ASSERT_TRUE(WriteSafetensors((dir_ / "model-00002-of-00002.safetensors").string(), second,
                               SafetensorsDtype::kBF16)
                  .ok());
  Write(kSafetensorsIndexFile, R"({"metadata": {"total_size": 16}, "weight_map": {
      "a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}})");
  auto reader = SafetensorsReader::OpenDir(dir_.string());
  ASSERT_TRUE(reader.ok()) << reader.status();
  ASSERT_EQ((*reader)->tensors().size(), 2u);
  EXPECT_EQ(ToFloat32(*(*reader)->Find("a")).value(), a);
  EXPECT_EQ(ToFloat32(*(*reader)->Find("b")).value(), b);
  EXPECT_EQ((*reader)->Find("c"), nullptr);

  // The map and the shards must agree.
  Write(kSafetensorsIndexFile, R"({"weight_map": {"a": "model-00001-of-00002.safetensors",
      "b": "model-00001-of-00002.safetensors"}})");
  auto misplaced = SafetensorsReader::OpenDir(dir_.string());
  EXPECT_NE(misplaced.status().message().find(
                "weight_map places tensor 'b' in model-00001-of-00002.safetensors, which does "
                "not hold it"),
            std::string::npos)
      << misplaced.status();
  Write(kSafetensorsIndexFile, R"({"weight_map": {"a": "../elsewhere.safetensors"}})");
  EXPECT_NE(SafetensorsReader::OpenDir(dir_.string())
                .status()
                .message()
                .find("is not a file name in the directory"),
            std::string::npos);
  fs::remove(dir_ / kSafetensorsIndexFile);
  EXPECT_EQ(SafetensorsReader::OpenDir(dir_.string()).status().code(),
            absl::StatusCode::kNotFound);
  // A pickled checkpoint is named, with how to convert it.
  Write("pytorch_model.bin", "PK");
  const absl::Status pickle = SafetensorsReader::OpenDir(dir_.string()).status();
  EXPECT_EQ(pickle.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(pickle.message().find("holds pytorch_model.bin (PyTorch's pickle format"),
            std::string::npos)
      << pickle;
  EXPECT_NE(pickle.message().find("safe_serialization=True"), std::string::npos) << pickle;
}

TEST_F(SafetensorsDir, NamesThePathOfAnInvalidFile) {
  Write(kSafetensorsFile, FileOf("{}", "x"));
  auto reader = SafetensorsReader::OpenDir(dir_.string());
  EXPECT_EQ(reader.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(reader.status().message().find(kSafetensorsFile), std::string::npos);
  EXPECT_NE(reader.status().message().find("1 bytes after the last tensor"), std::string::npos);
}

}  // namespace
}  // namespace attnserve::model
