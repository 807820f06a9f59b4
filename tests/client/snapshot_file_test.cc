#include "client/snapshot_file.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "tests/client/temp_dir.h"

namespace attnserve::client::test {
namespace {

using ::testing::HasSubstr;

TEST(SnapshotWriterTest, FileAppearsWholeOnlyAtCommit) {
  TempDir dir;
  const std::string path = dir.Path("out.snap");
  WriteFile(path, "old");
  absl::StatusOr<std::unique_ptr<SnapshotWriter>> writer =
      SnapshotWriter::Open(path, nullptr);
  ASSERT_TRUE(writer.ok()) << writer.status();
  EXPECT_EQ((*writer)->name(), path);
  ASSERT_TRUE((*writer)->Write("new ").ok());
  ASSERT_TRUE((*writer)->Write("bytes").ok());
  EXPECT_EQ(ReadFile(path), "old");
  EXPECT_EQ(dir.Files().size(), 2u);  // and the temporary file beside it
  ASSERT_TRUE((*writer)->Commit().ok());
  EXPECT_EQ(ReadFile(path), "new bytes");
  writer->reset();
  EXPECT_EQ(dir.Files(), std::vector<std::string>{"out.snap"});
}

TEST(SnapshotWriterTest, WithoutCommitLeavesNothingBehind) {
  TempDir dir;
  {
    absl::StatusOr<std::unique_ptr<SnapshotWriter>> writer =
        SnapshotWriter::Open(dir.Path("out.snap"), nullptr);
    ASSERT_TRUE(writer.ok()) << writer.status();
    ASSERT_TRUE((*writer)->Write("partial").ok());
  }
  EXPECT_TRUE(dir.Files().empty());
}

TEST(SnapshotWriterTest, DashWritesTheStream) {
  std::FILE* stream = std::tmpfile();
  absl::StatusOr<std::unique_ptr<SnapshotWriter>> writer =
      SnapshotWriter::Open("-", stream);
  ASSERT_TRUE(writer.ok()) << writer.status();
  EXPECT_EQ((*writer)->name(), "stdout");
  ASSERT_TRUE((*writer)->Write(std::string("a\0b", 3)).ok());
  ASSERT_TRUE((*writer)->Commit().ok());
  std::rewind(stream);
  char buffer[8];
  EXPECT_EQ(std::fread(buffer, 1, sizeof(buffer), stream), 3u);
  EXPECT_EQ(std::string(buffer, 3), std::string("a\0b", 3));
  std::fclose(stream);
}

TEST(SnapshotWriterTest, RefusesADirectoryBeforeWriting) {
  TempDir dir;
  absl::StatusOr<std::unique_ptr<SnapshotWriter>> writer =
      SnapshotWriter::Open(dir.Path(""), nullptr);
  ASSERT_FALSE(writer.ok());
  EXPECT_THAT(writer.status().message(), HasSubstr("Is a directory"));
}

TEST(SnapshotReaderTest, ReadsBoundedChunksInOrderThenNothing) {
  TempDir dir;
  const std::string bytes = PatternBytes(10);
  WriteFile(dir.Path("in"), bytes);
  absl::StatusOr<std::unique_ptr<SnapshotReader>> reader =
      SnapshotReader::Open(dir.Path("in"), nullptr);
  ASSERT_TRUE(reader.ok()) << reader.status();
  std::string chunk;
  std::vector<std::string> chunks;
  while ((*reader)->Read(4, &chunk).ok() && !chunk.empty()) {
    chunks.push_back(chunk);
  }
  EXPECT_EQ(chunks,
            (std::vector<std::string>{bytes.substr(0, 4), bytes.substr(4, 4),
                                      bytes.substr(8)}));
}

TEST(SnapshotReaderTest, DashReadsTheStream) {
  std::istringstream in(std::string("x\0y", 3));
  absl::StatusOr<std::unique_ptr<SnapshotReader>> reader =
      SnapshotReader::Open("-", &in);
  ASSERT_TRUE(reader.ok()) << reader.status();
  EXPECT_EQ((*reader)->name(), "stdin");
  std::string chunk;
  ASSERT_TRUE((*reader)->Read(2, &chunk).ok());
  EXPECT_EQ(chunk, std::string("x\0", 2));
  ASSERT_TRUE((*reader)->Read(2, &chunk).ok());
  EXPECT_EQ(chunk, "y");  // replaced, not appended
  ASSERT_TRUE((*reader)->Read(2, &chunk).ok());
  EXPECT_EQ(chunk, "");
}

TEST(SnapshotReaderTest, MissingFileAndDirectoryAreErrorsNamingThePath) {
  TempDir dir;
  absl::StatusOr<std::unique_ptr<SnapshotReader>> reader =
      SnapshotReader::Open(dir.Path("missing"), nullptr);
  ASSERT_FALSE(reader.ok());
  EXPECT_EQ(reader.status().message(), "cannot read " + dir.Path("missing") +
                                           ": No such file or directory");
  reader = SnapshotReader::Open(dir.Path(""), nullptr);
  ASSERT_FALSE(reader.ok());
  EXPECT_THAT(reader.status().message(), HasSubstr("Is a directory"));
}

}  // namespace
}  // namespace attnserve::client::test
