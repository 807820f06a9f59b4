// RetryLoop on its own with a hand-driven clock, and the session commands
// against the fake server: the x-session-id header on every call that names a
// session, and UNAVAILABLE sent again within the bounds.
#include "client/retry.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "tests/client/fake_server.h"
#include "tests/client/temp_dir.h"

namespace attnserve::client::test {
namespace {

using ::testing::ElementsAre;

const grpc::Status kUnavailable(grpc::StatusCode::UNAVAILABLE,
                                "the server is shutting down");

// A clock that moves only when the test or the loop moves it.
struct ManualClock {
  absl::Time now = absl::FromUnixSeconds(1700000000);
  std::vector<absl::Duration> waits;
  RetryClock clock() {
    RetryClock clock;
    clock.now = [this] { return now; };
    clock.sleep = [this](absl::Duration wait) {
      waits.push_back(wait);
      now += wait;
    };
    return clock;
  }
};

GlobalOptions WithTimeout(double seconds) {
  GlobalOptions options;
  options.timeout_seconds = seconds;
  return options;
}

// Wait n (0-based) is 50 ms * 2^n, give or take 20%.
void ExpectBackoff(const std::vector<absl::Duration>& waits) {
  for (size_t n = 0; n < waits.size(); ++n) {
    const double nominal_ms = 50 * std::ldexp(1.0, static_cast<int>(n));
    EXPECT_GE(absl::ToDoubleMilliseconds(waits[n]), 0.8 * nominal_ms) << n;
    EXPECT_LE(absl::ToDoubleMilliseconds(waits[n]), 1.2 * nominal_ms) << n;
  }
}

TEST(RetryLoopTest, RetriesUnavailableSevenTimesWithDoublingWaits) {
  ManualClock manual;
  const RetryClock clock = manual.clock();
  RetryLoop loop(WithTimeout(60), kUnaryTimeoutSeconds, clock);
  int retries = 0;
  while (loop.Retry(kUnavailable)) ++retries;
  EXPECT_EQ(retries, 7);
  EXPECT_EQ(loop.retries(), 7);
  ASSERT_EQ(manual.waits.size(), 7u);
  ExpectBackoff(manual.waits);
}

// With the default policy the budget would stop an eighth retry too.
TEST(RetryLoopTest, MakesAtMostMaxAttemptsWhateverTheBudget) {
  ManualClock manual;
  const RetryClock clock = manual.clock();
  RetryPolicy policy;
  policy.budget = absl::Hours(1);
  RetryLoop loop(WithTimeout(3600), kUnaryTimeoutSeconds, clock, policy);
  while (loop.Retry(kUnavailable)) {
  }
  EXPECT_EQ(loop.retries(), policy.max_attempts - 1);
}

// A stopping gRPC server cancels the calls that reach it.
TEST(RetryLoopTest, RetriesCancelledToo) {
  ManualClock manual;
  const RetryClock clock = manual.clock();
  RetryLoop loop(GlobalOptions(), kUnaryTimeoutSeconds, clock);
  EXPECT_TRUE(
      loop.Retry(grpc::Status(grpc::StatusCode::CANCELLED, "CANCELLED")));
  EXPECT_EQ(loop.retries(), 1);
}

TEST(RetryLoopTest, NeverRetriesAnotherCode) {
  ManualClock manual;
  const RetryClock clock = manual.clock();
  RetryLoop loop(GlobalOptions(), kUnaryTimeoutSeconds, clock);
  for (grpc::StatusCode code :
       {grpc::StatusCode::OK, grpc::StatusCode::DEADLINE_EXCEEDED,
        grpc::StatusCode::NOT_FOUND, grpc::StatusCode::RESOURCE_EXHAUSTED,
        grpc::StatusCode::FAILED_PRECONDITION, grpc::StatusCode::INTERNAL}) {
    EXPECT_FALSE(loop.Retry(grpc::Status(code, "x"))) << code;
  }
  EXPECT_EQ(loop.retries(), 0);
  EXPECT_TRUE(manual.waits.empty());
}

// Waits of at most 60 and 120 ms fit in 250 ms; a third of at least 160 ms
// does not.
TEST(RetryLoopTest, StartsNoRetryThatWouldEndPastTheDeadline) {
  ManualClock manual;
  const RetryClock clock = manual.clock();
  RetryLoop loop(WithTimeout(0.25), kUnaryTimeoutSeconds, clock);
  EXPECT_TRUE(loop.Retry(kUnavailable));
  EXPECT_TRUE(loop.Retry(kUnavailable));
  EXPECT_FALSE(loop.Retry(kUnavailable));
  EXPECT_EQ(manual.waits.size(), 2u);
}

// Attempts of 3 s each: the fourth would start past 10 s.
TEST(RetryLoopTest, StartsNoRetryAfterTheBudget) {
  ManualClock manual;
  const RetryClock clock = manual.clock();
  RetryLoop loop(WithTimeout(60), kUnaryTimeoutSeconds, clock);
  int attempts = 1;
  while (true) {
    manual.now += absl::Seconds(3);
    if (!loop.Retry(kUnavailable)) break;
    ++attempts;
  }
  EXPECT_EQ(attempts, 4);
}

TEST(RetryLoopTest, EveryAttemptGetsTheFirstAttemptsDeadline) {
  ManualClock manual;
  const RetryClock clock = manual.clock();
  const absl::Time start = manual.now;
  RetryLoop loop(GlobalOptions(), kUnaryTimeoutSeconds, clock);
  for (int attempt = 0; attempt < 2; ++attempt) {
    grpc::ClientContext context;
    loop.Prepare(&context, "s1");
    EXPECT_EQ(absl::FromChrono(context.deadline()),
              start + absl::Seconds(kUnaryTimeoutSeconds));
    ASSERT_TRUE(loop.Retry(kUnavailable));
  }
}

Call Sent(const char* method, const std::string& session) {
  return Call{method, session};
}
Call SentWithoutHeader(const char* method) {
  return Call{method, std::nullopt};
}

MATCHER_P(IsCall, expected, "") {
  return arg.method == expected.method &&
         arg.session_header == expected.session_header;
}

template <typename... Calls>
auto CallsAre(const Calls&... calls) {
  return ElementsAre(IsCall(calls)...);
}

TEST_F(ClientTest, CallsNamingASessionSendItsIdAsHeader) {
  TempDir dir;
  service_.snapshot = "snapshot bytes";
  ASSERT_EQ(Client({"sessions", "create"}).code, kExitOk);
  ASSERT_EQ(Client({"sessions", "get", "s1"}).code, kExitOk);
  ASSERT_EQ(Client({"sessions", "list"}).code, kExitOk);
  ASSERT_EQ(Client({"sessions", "export", "s1", dir.Path("s1.snap")}).code,
            kExitOk);
  ASSERT_EQ(Client({"sessions", "import", dir.Path("s1.snap")}).code, kExitOk);
  ASSERT_EQ(Client({"sessions", "fork", "s1"}).code, kExitOk);
  ASSERT_EQ(Client({"generate", "--session=s1", "x"}).code, kExitOk);
  ASSERT_EQ(Client({"generate", "x"}).code, kExitOk);
  ASSERT_EQ(Client({"chat"}, "hi\n").code, kExitOk);
  ASSERT_EQ(Client({"sessions", "close", "f1"}).code, kExitOk);
  EXPECT_THAT(
      service_.calls(),
      CallsAre(SentWithoutHeader("CreateSession"), Sent("GetSession", "s1"),
               SentWithoutHeader("ListSessions"), Sent("ExportSession", "s1"),
               SentWithoutHeader("ImportSession"), Sent("ForkSession", "s1"),
               Sent("Generate", "s1"), SentWithoutHeader("Generate"),
               SentWithoutHeader("CreateSession"), Sent("Generate", "s2"),
               Sent("CloseSession", "s2"), Sent("CloseSession", "f1")));
  EXPECT_TRUE(clock_.waits().empty());
}

TEST_F(ClientTest, UnaryCallsAreSentAgainWhileUnavailable) {
  service_.AddSession("s1");
  service_.refusals = 2;
  const Outcome run = Client({"sessions", "get", "s1"});
  EXPECT_EQ(run.code, kExitOk) << run.err;
  EXPECT_EQ(run.err, "");  // silent retries
  EXPECT_THAT(run.out, ::testing::HasSubstr("id:"));
  EXPECT_THAT(service_.calls(),
              CallsAre(Sent("GetSession", "s1"), Sent("GetSession", "s1"),
                       Sent("GetSession", "s1")));
  EXPECT_EQ(clock_.waits().size(), 2u);
  ExpectBackoff(clock_.waits());
}

TEST_F(ClientTest, RetriesGiveUpAfterEightAttemptsWithTheLastError) {
  service_.AddSession("s1");
  service_.refusals = 100;
  service_.refusal = {grpc::StatusCode::UNAVAILABLE,
                      "session s1 is leased by another writer; retry"};
  const Outcome run = Client({"sessions", "close", "s1"});
  EXPECT_EQ(run.code, kExitFailure);
  EXPECT_EQ(run.out, "");
  EXPECT_EQ(run.err,
            "attnserve: UNAVAILABLE: session s1 is leased by another writer; "
            "retry\n");
  EXPECT_EQ(service_.calls().size(), 8u);
  EXPECT_EQ(clock_.waits().size(), 7u);
  ExpectBackoff(clock_.waits());
  EXPECT_TRUE(service_.HasSession("s1"));
}

TEST_F(ClientTest, CreateAndForkAreSentAgainWhileUnavailable) {
  service_.refusals = 1;
  Outcome run = Client({"sessions", "create"});
  EXPECT_EQ(run.code, kExitOk) << run.err;
  EXPECT_EQ(run.out, "s1\n");
  service_.refusals = 1;
  run = Client({"sessions", "fork", "s1"});
  EXPECT_EQ(run.code, kExitOk) << run.err;
  EXPECT_EQ(run.out, "f1\n");
  EXPECT_THAT(service_.calls(),
              CallsAre(SentWithoutHeader("CreateSession"),
                       SentWithoutHeader("CreateSession"),
                       Sent("ForkSession", "s1"), Sent("ForkSession", "s1")));
}

TEST_F(ClientTest, ExportIsSentAgainWhileUnavailableBeforeItsFirstChunk) {
  TempDir dir;
  service_.AddSession("s1");
  service_.snapshot = PatternBytes(1000);
  service_.refusals = 2;
  const std::string file = dir.Path("s1.snap");
  const Outcome run = Client({"sessions", "export", "s1", file});
  EXPECT_EQ(run.code, kExitOk) << run.err;
  EXPECT_TRUE(ReadFile(file) == service_.snapshot) << "the file differs";
  EXPECT_EQ(service_.calls().size(), 3u);
}

TEST_F(ClientTest, ExportIsNotSentAgainAfterAChunk) {
  TempDir dir;
  service_.AddSession("s1");
  service_.snapshot = PatternBytes(1000);
  service_.export_status = kUnavailable;
  const Outcome run = Client({"sessions", "export", "s1", dir.Path("x")});
  EXPECT_EQ(run.code, kExitFailure);
  EXPECT_EQ(run.err, "attnserve: UNAVAILABLE: the server is shutting down\n");
  EXPECT_EQ(service_.calls().size(), 1u);
  EXPECT_TRUE(dir.Files().empty());
}

TEST_F(ClientTest, ImportFromAFileIsSentAgainFromItsStart) {
  TempDir dir;
  const std::string bytes = PatternBytes((size_t{1} << 20) + 10);
  const std::string file = dir.Path("in.snap");
  WriteFile(file, bytes);
  service_.refusals = 1;
  const Outcome run = Client({"sessions", "import", "--ttl_seconds=9", file});
  EXPECT_EQ(run.code, kExitOk) << run.err;
  EXPECT_EQ(run.out, "i1\n");
  EXPECT_THAT(run.err, ::testing::HasSubstr("(1048586 bytes)"));
  EXPECT_EQ(service_.calls().size(), 2u);
  const auto requests = service_.import_requests();  // the accepted call's
  ASSERT_EQ(requests.size(), 2u);
  EXPECT_EQ(requests[0].ttl_seconds(), 9);
  EXPECT_TRUE(requests[0].data() + requests[1].data() == bytes);
}

TEST_F(ClientTest, ImportFromStdinIsNotSentAgain) {
  service_.refusals = 1;
  const Outcome run = Client({"sessions", "import", "-"}, PatternBytes(100));
  EXPECT_EQ(run.code, kExitFailure);
  EXPECT_EQ(run.err,
            "attnserve: UNAVAILABLE: the server is shutting down; "
            "no new turns\n");
  EXPECT_EQ(service_.calls().size(), 1u);
  EXPECT_TRUE(clock_.waits().empty());
}

}  // namespace
}  // namespace attnserve::client::test
