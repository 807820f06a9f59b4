// Turns across a replica's restart, against the fake server: Generate sent
// again while refused before its first token, never after one, and a turn that
// a shutdown stopped continued on a named session.
#include "client/turn.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/client/fake_server.h"

namespace attnserve::client::test {
namespace {

using ::testing::ElementsAre;

using Script = FakeAttnServe::GenerateScript;

const grpc::Status kUnavailable(grpc::StatusCode::UNAVAILABLE,
                                "the server is shutting down; no new turns");

std::vector<int> MaxTokens(const std::vector<v1::GenerateRequest>& requests) {
  std::vector<int> max_tokens;
  for (const v1::GenerateRequest& r : requests) {
    max_tokens.push_back(r.sampling().max_tokens());
  }
  return max_tokens;
}

std::vector<std::string> Headers(const std::vector<Call>& calls) {
  std::vector<std::string> headers;
  for (const Call& call : calls) {
    headers.push_back(call.session_header.value_or("(none)"));
  }
  return headers;
}

TEST_F(ClientTest, GenerateIsSentAgainWhileRefusedBeforeItsFirstToken) {
  service_.refusals = 2;
  const Outcome run = Client({"generate", "--session=s1", "--seed=3", "Hi"});
  EXPECT_EQ(run.code, kExitOk) << run.err;
  EXPECT_EQ(run.out, std::string("Hello\xff\0", 7));  // one request's output
  EXPECT_EQ(run.err,
            "[finish=length prompt_tokens=2 generated_tokens=4 position=72 "
            "ttft_ms=1.5]\n");
  const auto requests = service_.generate_requests();
  ASSERT_EQ(requests.size(), 3u);
  for (const v1::GenerateRequest& r : requests) {
    EXPECT_EQ(r.SerializeAsString(), requests[0].SerializeAsString());
  }
  EXPECT_EQ(requests[0].text(), "Hi");
  EXPECT_THAT(Headers(service_.calls()), ElementsAre("s1", "s1", "s1"));
  EXPECT_EQ(clock_.waits().size(), 2u);
}

TEST_F(ClientTest, OneTurnGenerateIsSentAgainWithoutHeader) {
  service_.refusals = 1;
  const Outcome run = Client({"generate", "x"});
  EXPECT_EQ(run.code, kExitOk) << run.err;
  EXPECT_EQ(run.out, std::string("Hello\xff\0", 7));
  EXPECT_THAT(Headers(service_.calls()), ElementsAre("(none)", "(none)"));
}

TEST_F(ClientTest, GenerateIsNotSentAgainAfterAToken) {
  service_.generate_status = kUnavailable;
  const Outcome run = Client({"generate", "--session=s1", "x"});
  EXPECT_EQ(run.code, kExitFailure);
  EXPECT_EQ(run.out, std::string("Hello\xff\0", 7));
  EXPECT_EQ(run.err,
            "attnserve: UNAVAILABLE: the server is shutting down; no new "
            "turns\n");
  EXPECT_EQ(service_.generate_requests().size(), 1u);
  EXPECT_TRUE(clock_.waits().empty());
}

TEST_F(ClientTest, GenerateGivesUpAfterEightRefusals) {
  service_.refusals = 100;
  const Outcome run = Client({"generate", "--session=s1", "x"});
  EXPECT_EQ(run.code, kExitFailure);
  EXPECT_EQ(run.out, "");
  EXPECT_EQ(run.err,
            "attnserve: UNAVAILABLE: the server is shutting down; no new "
            "turns\n");
  EXPECT_EQ(service_.generate_requests().size(), 8u);
  EXPECT_EQ(clock_.waits().size(), 7u);
}

TEST_F(ClientTest, ShutdownAfterTokensOfANamedSessionIsContinued) {
  service_.generate_scripts = {
      Script{{"a", "b", "c"}, grpc::Status::OK, v1::FINISH_REASON_SHUTDOWN}};
  service_.tokens = {"d", "e"};
  const Outcome run =
      Client({"generate", "--session=s9", "--max_tokens=10", "--seed=7",
              "--temperature=0.5", "--stop=END", "Hi"});
  EXPECT_EQ(run.code, kExitOk) << run.err;
  EXPECT_EQ(run.out, "abcde");
  // One finish line for the whole turn: the first call's prompt and ttft, the
  // tokens of both, the last call's reason and position.
  EXPECT_EQ(run.err,
            "[finish=length prompt_tokens=2 generated_tokens=5 position=70 "
            "ttft_ms=1.5]\n");
  const auto requests = service_.generate_requests();
  ASSERT_EQ(requests.size(), 2u);
  const v1::GenerateRequest& next = requests[1];
  EXPECT_EQ(next.session_id(), "s9");
  EXPECT_EQ(next.prompt_case(), v1::GenerateRequest::PROMPT_NOT_SET);
  EXPECT_EQ(next.sampling().max_tokens(), 7);
  EXPECT_EQ(next.sampling().seed(), 7u);
  EXPECT_FLOAT_EQ(next.sampling().temperature(), 0.5f);
  ASSERT_EQ(next.sampling().stop_size(), 1);
  EXPECT_EQ(next.sampling().stop(0), "END");
  EXPECT_THAT(Headers(service_.calls()), ElementsAre("s9", "s9"));
}

// The stopped replica still holds the session's lease for a moment.
TEST_F(ClientTest, ContinuationIsSentAgainWhileTheSessionIsLeased) {
  service_.generate_scripts = {
      Script{{"a"}, grpc::Status::OK, v1::FINISH_REASON_SHUTDOWN},
      Script{{},
             {grpc::StatusCode::UNAVAILABLE,
              "session s9 is leased by another writer; retry"},
             v1::FINISH_REASON_UNSPECIFIED}};
  service_.tokens = {"b"};
  const Outcome run = Client({"generate", "--session=s9", "x"});
  EXPECT_EQ(run.code, kExitOk) << run.err;
  EXPECT_EQ(run.out, "ab");
  EXPECT_THAT(MaxTokens(service_.generate_requests()), ElementsAre(0, 0, 0));
  EXPECT_EQ(clock_.waits().size(), 1u);
}

// The stopped replica's gRPC server cancels the calls that reach it as it
// stops; the one after it has the session.
TEST_F(ClientTest, ContinuationIsSentAgainWhenTheStoppingServerCancelsIt) {
  service_.generate_scripts = {
      Script{{"a"}, grpc::Status::OK, v1::FINISH_REASON_SHUTDOWN},
      Script{{}, grpc::Status::CANCELLED, v1::FINISH_REASON_UNSPECIFIED}};
  service_.tokens = {"b"};
  const Outcome run = Client({"generate", "--session=s9", "x"});
  EXPECT_EQ(run.code, kExitOk) << run.err;
  EXPECT_EQ(run.out, "ab");
  EXPECT_EQ(service_.generate_requests().size(), 3u);
}

TEST_F(ClientTest, ContinuesATurnAtMostThreeTimes) {
  const Script stopped{{"t"}, grpc::Status::OK, v1::FINISH_REASON_SHUTDOWN};
  service_.generate_scripts = {stopped, stopped, stopped, stopped, stopped};
  const Outcome run =
      Client({"generate", "--session=s9", "--max_tokens=10", "x"});
  EXPECT_EQ(run.code, kExitFailure);
  EXPECT_EQ(run.out, "tttt");
  EXPECT_EQ(run.err,
            "[finish=shutdown prompt_tokens=1 generated_tokens=4 position=70 "
            "ttft_ms=1.5]\n"
            "attnserve: generation stopped: the server is shutting down\n");
  EXPECT_THAT(MaxTokens(service_.generate_requests()),
              ElementsAre(10, 9, 8, 7));
}

TEST_F(ClientTest, ShutdownIsReportedWhenTheTurnCannotBeContinued) {
  service_.reason = v1::FINISH_REASON_SHUTDOWN;
  // A one-turn session is gone with the server.
  Outcome run = Client({"generate", "x"});
  EXPECT_EQ(run.code, kExitFailure);
  EXPECT_EQ(service_.generate_requests().size(), 1u);
  // Before the first token the prompt may be only partly consumed.
  service_.tokens = {};
  run = Client({"generate", "--session=s9", "x"});
  EXPECT_EQ(run.code, kExitFailure);
  EXPECT_EQ(run.err,
            "[finish=shutdown prompt_tokens=1 generated_tokens=0 position=71 "
            "ttft_ms=1.5]\n"
            "attnserve: generation stopped: the server is shutting down\n");
  EXPECT_EQ(service_.generate_requests().size(), 2u);
}

TEST_F(ClientTest, ContinuationThatFailsReportsItsErrorAfterTheStop) {
  service_.generate_scripts = {
      Script{{"a"}, grpc::Status::OK, v1::FINISH_REASON_SHUTDOWN}};
  service_.generate_status = {grpc::StatusCode::NOT_FOUND,
                              "session 's9' not found"};
  service_.tokens = {};
  const Outcome run = Client({"generate", "--session=s9", "x"});
  EXPECT_EQ(run.code, kExitFailure);
  EXPECT_EQ(run.out, "a");
  EXPECT_EQ(run.err,
            "[finish=shutdown prompt_tokens=1 generated_tokens=1 position=71 "
            "ttft_ms=1.5]\n"
            "attnserve: NOT_FOUND: session 's9' not found\n");
  EXPECT_EQ(service_.generate_requests().size(), 2u);
}

TEST_F(ClientTest, ChatContinuesAStoppedTurnAndGoesOn) {
  service_.generate_scripts = {
      Script{{"x", "y"}, grpc::Status::OK, v1::FINISH_REASON_SHUTDOWN}};
  service_.tokens = {"o", "k"};
  const Outcome run = Client({"chat", "--max_tokens=5"}, "a\nb\n");
  EXPECT_EQ(run.code, kExitOk) << run.err;
  EXPECT_EQ(run.out, "xyok\nok\n");
  const auto requests = service_.generate_requests();
  ASSERT_EQ(requests.size(), 3u);
  EXPECT_EQ(requests[0].text(), "a\n");
  EXPECT_EQ(requests[1].prompt_case(), v1::GenerateRequest::PROMPT_NOT_SET);
  EXPECT_EQ(requests[2].text(), "b\n");
  EXPECT_THAT(MaxTokens(requests), ElementsAre(5, 3, 5));
  EXPECT_EQ(service_.closed(), std::vector<std::string>{"s1"});
}

TEST_F(ClientTest, BenchCountsRetriesAndContinuations) {
  service_.refusals = 2;  // the session creation
  service_.generate_scripts = {
      Script{{"a"}, grpc::Status::OK, v1::FINISH_REASON_SHUTDOWN}};
  const Outcome run = Client(
      {"bench", "--sessions=1", "--turns=2", "--max_tokens=4", "--json"});
  EXPECT_EQ(run.code, kExitOk) << run.err;
  EXPECT_THAT(run.out,
              ::testing::HasSubstr("\"generated_tokens\":9,"));  // 1 + 4 + 4
  EXPECT_THAT(
      run.out,
      ::testing::EndsWith("\"errors\":0,\"retries\":2,\"continuations\":1}\n"));
  EXPECT_THAT(MaxTokens(service_.generate_requests()), ElementsAre(4, 3, 4));
}

}  // namespace
}  // namespace attnserve::client::test
