// sessions export, import and fork against the fake server: the bytes that
// cross the wire and land in files, what is printed, and how errors end.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <string>
#include <vector>

#include "tests/client/fake_server.h"
#include "tests/client/temp_dir.h"

namespace attnserve::client::test {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::MatchesRegex;

constexpr size_t kMiB = size_t{1} << 20;
// Three chunks: two full, one short.
constexpr size_t kSnapshotBytes = 2 * kMiB + kMiB / 2 + 17;

class SessionSnapshotsTest : public ClientTest {
 protected:
  TempDir dir_;
};

TEST_F(SessionSnapshotsTest, ExportWritesExactlyTheServedChunksToFile) {
  service_.AddSession("s1");
  service_.snapshot = PatternBytes(kSnapshotBytes);
  const std::string file = dir_.Path("s1.snap");
  WriteFile(file, "an older export");
  const Outcome run = Client({"sessions", "export", "s1", file});
  EXPECT_EQ(run.code, kExitOk) << run.err;
  EXPECT_THAT(service_.export_chunks(), ElementsAre(kMiB, kMiB, kMiB / 2 + 17));
  EXPECT_TRUE(ReadFile(file) == service_.snapshot) << "the file differs";
  EXPECT_EQ(dir_.Files(), std::vector<std::string>{"s1.snap"});
  struct stat st;
  ASSERT_EQ(stat(file.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600);
  EXPECT_EQ(run.out, "");
  EXPECT_THAT(run.err,
              MatchesRegex("exported s1 to .*/s1\\.snap: 2\\.5 MiB "
                           "\\(2621457 bytes\\) in [0-9]+\\.[0-9] ms\n"));
}

TEST_F(SessionSnapshotsTest, ExportToDashWritesStdout) {
  service_.AddSession("s1");
  service_.snapshot = PatternBytes(kMiB + 3);
  const Outcome run = Client({"sessions", "export", "s1", "-"});
  EXPECT_EQ(run.code, kExitOk) << run.err;
  EXPECT_TRUE(run.out == service_.snapshot) << "stdout differs";
  EXPECT_THAT(run.err, MatchesRegex("exported s1 to stdout: 1\\.0 MiB "
                                    "\\(1048579 bytes\\) in .* ms\n"));
}

TEST_F(SessionSnapshotsTest, ExportErrorMidStreamLeavesTheFileUntouched) {
  service_.AddSession("s1");
  service_.snapshot = PatternBytes(kSnapshotBytes);
  service_.export_status = {grpc::StatusCode::FAILED_PRECONDITION,
                            "session 's1' has a turn in flight"};
  const std::string file = dir_.Path("s1.snap");
  WriteFile(file, "an older export");
  const Outcome run = Client({"sessions", "export", "s1", file});
  EXPECT_EQ(run.code, kExitFailure);
  EXPECT_EQ(run.err,
            "attnserve: FAILED_PRECONDITION: session 's1' has a turn in "
            "flight\n");
  EXPECT_EQ(service_.export_chunks().size(), 1u);  // it did get a chunk
  EXPECT_EQ(ReadFile(file), "an older export");
  EXPECT_EQ(dir_.Files(), std::vector<std::string>{"s1.snap"});
}

TEST_F(SessionSnapshotsTest, ExportOfAnUnknownSessionCreatesNoFile) {
  const Outcome run =
      Client({"sessions", "export", "nope", dir_.Path("x.snap")});
  EXPECT_EQ(run.code, kExitFailure);
  EXPECT_EQ(run.err, "attnserve: NOT_FOUND: session 'nope' not found\n");
  EXPECT_TRUE(dir_.Files().empty());
}

TEST_F(SessionSnapshotsTest, ExportShorterThanAnnouncedFails) {
  service_.AddSession("s1");
  service_.snapshot = PatternBytes(kMiB + 5);
  service_.export_total_bytes = kMiB + 6;
  const Outcome run = Client({"sessions", "export", "s1", dir_.Path("x")});
  EXPECT_EQ(run.code, kExitFailure);
  EXPECT_EQ(run.err,
            "attnserve: the export of s1 ended after 1048581 of 1048582 "
            "bytes\n");
  EXPECT_TRUE(dir_.Files().empty());
}

TEST_F(SessionSnapshotsTest, ImportSendsTheFileInOrderInChunksOfAtMostOneMiB) {
  const std::string bytes = PatternBytes(kSnapshotBytes);
  const std::string file = dir_.Path("in.snap");
  WriteFile(file, bytes);
  const Outcome run = Client({"sessions", "import", "--ttl_seconds=90", file});
  EXPECT_EQ(run.code, kExitOk) << run.err;
  EXPECT_EQ(run.out, "i1\n");
  EXPECT_THAT(run.err, MatchesRegex("imported i1 from .*/in\\.snap: 2\\.5 MiB "
                                    "\\(2621457 bytes\\) in [0-9.]+ ms, "
                                    "position 76\n"));
  const std::vector<v1::ImportSessionRequest> requests =
      service_.import_requests();
  ASSERT_EQ(requests.size(), 3u);
  std::string received;
  for (size_t i = 0; i < requests.size(); ++i) {
    EXPECT_LE(requests[i].data().size(), kMiB) << i;
    EXPECT_EQ(requests[i].ttl_seconds(), i == 0 ? 90 : 0) << i;
    received += requests[i].data();
  }
  EXPECT_TRUE(received == bytes) << "the server received other bytes";
}

TEST_F(SessionSnapshotsTest, ImportReadsStdinForDash) {
  const std::string bytes = PatternBytes(1000);
  const Outcome run = Client({"sessions", "import", "-"}, bytes);
  EXPECT_EQ(run.code, kExitOk) << run.err;
  EXPECT_EQ(run.out, "i1\n");
  ASSERT_EQ(service_.import_requests().size(), 1u);
  EXPECT_TRUE(service_.import_requests()[0].data() == bytes);
  EXPECT_EQ(service_.import_requests()[0].ttl_seconds(), 0);
  EXPECT_THAT(run.err,
              HasSubstr("imported i1 from stdin: 1000 B (1000 bytes)"));
}

TEST_F(SessionSnapshotsTest, ImportOfAnEmptyFileLetsTheServerAnswer) {
  service_.import_status = {grpc::StatusCode::INVALID_ARGUMENT,
                            "snapshot of 0 bytes is shorter than its header"};
  const std::string file = dir_.Path("empty");
  WriteFile(file, "");
  const Outcome run = Client({"sessions", "import", "--ttl_seconds=5", file});
  EXPECT_EQ(run.code, kExitFailure);
  EXPECT_EQ(run.out, "");
  EXPECT_EQ(run.err,
            "attnserve: INVALID_ARGUMENT: snapshot of 0 bytes is shorter than "
            "its header\n");
  ASSERT_EQ(service_.import_requests().size(), 1u);
  EXPECT_EQ(service_.import_requests()[0].ttl_seconds(), 5);
}

TEST_F(SessionSnapshotsTest, ImportReportsTheServersStatus) {
  service_.import_status = {grpc::StatusCode::DATA_LOSS,
                            "snapshot CRC-32C mismatch"};
  const std::string file = dir_.Path("bad.snap");
  WriteFile(file, PatternBytes(kMiB + 1));
  const Outcome run = Client({"sessions", "import", file});
  EXPECT_EQ(run.code, kExitFailure);
  EXPECT_EQ(run.out, "");
  EXPECT_EQ(run.err, "attnserve: DATA_LOSS: snapshot CRC-32C mismatch\n");
}

TEST_F(SessionSnapshotsTest, ForkPrintsTheNewIdAlone) {
  service_.AddSession("s1");
  Outcome run = Client({"sessions", "fork", "--ttl_seconds=30", "s1"});
  EXPECT_EQ(run.code, kExitOk) << run.err;
  EXPECT_EQ(run.out, "f1\n");
  EXPECT_EQ(run.err, "");
  ASSERT_EQ(service_.fork_requests().size(), 1u);
  EXPECT_EQ(service_.fork_requests()[0].session_id(), "s1");
  EXPECT_EQ(service_.fork_requests()[0].ttl_seconds(), 30);
  EXPECT_TRUE(service_.HasSession("f1"));

  run = Client({"sessions", "fork", "gone"});
  EXPECT_EQ(run.code, kExitFailure);
  EXPECT_EQ(run.out, "");
  EXPECT_EQ(run.err, "attnserve: NOT_FOUND: session 'gone' not found\n");
}

// Nothing listens at the address: connecting would be exit code 3.
TEST(SessionSnapshotsLocalTest, FileErrorsComeBeforeConnecting) {
  TempDir dir;
  const std::string server =
      "--server=127.0.0.1:" + std::to_string(UnusedPort());
  const std::string missing = dir.Path("missing.snap");
  Outcome run = RunArgs({server, "sessions", "import", missing});
  EXPECT_EQ(run.code, kExitFailure);
  EXPECT_EQ(run.err, "attnserve: cannot read " + missing +
                         ": No such file or directory\n");

  run = RunArgs({server, "sessions", "import", dir.Path("")});
  EXPECT_EQ(run.code, kExitFailure);
  EXPECT_THAT(run.err, HasSubstr(": Is a directory\n"));

  const std::string nowhere = dir.Path("no/such/dir.snap");
  run = RunArgs({server, "sessions", "export", "s1", nowhere});
  EXPECT_EQ(run.code, kExitFailure);
  EXPECT_EQ(run.err, "attnserve: cannot write " + nowhere +
                         ": No such file or directory\n");
  EXPECT_TRUE(dir.Files().empty());
}

TEST(SessionSnapshotsLocalTest, UsageAndHelpListTheNewSubcommands) {
  const std::string server =
      "--server=127.0.0.1:" + std::to_string(UnusedPort());
  Outcome run = RunArgs({server, "sessions", "export", "s1"});
  EXPECT_EQ(run.code, kExitUsage);
  EXPECT_THAT(run.err,
              HasSubstr("missing arguments; usage: sessions export ID FILE"));
  run = RunArgs({server, "sessions", "import"});
  EXPECT_EQ(run.code, kExitUsage);
  run = RunArgs({server, "sessions", "fork", "a", "b"});
  EXPECT_EQ(run.code, kExitUsage);
  EXPECT_THAT(run.err, HasSubstr("unexpected argument \"b\""));
  run = RunArgs({server, "sessions", "frob"});
  EXPECT_EQ(run.code, kExitUsage);
  EXPECT_THAT(run.err, HasSubstr("create, get, list, close, export, import, "
                                 "fork"));

  run = RunArgs({"sessions", "--help"});
  EXPECT_EQ(run.code, kExitOk);
  EXPECT_THAT(run.out, HasSubstr("  export ID FILE\n"));
  EXPECT_THAT(run.out, HasSubstr("  import [--ttl_seconds=N] FILE\n"));
  EXPECT_THAT(run.out, HasSubstr("  fork [--ttl_seconds=N] ID\n"));
  run = RunArgs({"help", "sessions", "import"});
  EXPECT_EQ(run.code, kExitOk);
  EXPECT_THAT(run.out, HasSubstr("--ttl_seconds=N"));
  run = RunArgs({"--help"});
  EXPECT_THAT(run.out,
              HasSubstr("sessions create|get|list|close|export|import|fork\n"));
}

}  // namespace
}  // namespace attnserve::client::test
