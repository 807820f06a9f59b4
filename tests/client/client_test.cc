// Runs the client's commands in-process against the fake server and checks what
// they send and what they print.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "tests/client/fake_server.h"

namespace attnserve::client::test {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

TEST_F(ClientTest, GenerateStreamsRawBytesAndPrintsFinishLine) {
  const Outcome run =
      Client({"generate", "--model=tiny", "--temperature=0.5", "--top_k=5",
              "--top_p=0.9", "--seed=7", "--max_tokens=4", "--stop=END", "Hi"});
  EXPECT_EQ(run.code, kExitOk) << run.err;
  EXPECT_EQ(run.out, std::string("Hello\xff\0", 7));
  EXPECT_EQ(run.err,
            "[finish=length prompt_tokens=2 generated_tokens=4 position=72 "
            "ttft_ms=1.5]\n");
  const auto requests = service_.generate_requests();
  ASSERT_EQ(requests.size(), 1u);
  const v1::GenerateRequest& r = requests[0];
  EXPECT_EQ(r.model(), "tiny");
  EXPECT_EQ(r.session_id(), "");
  EXPECT_EQ(r.text(), "Hi");
  EXPECT_FALSE(r.logprobs());
  EXPECT_FLOAT_EQ(r.sampling().temperature(), 0.5f);
  EXPECT_EQ(r.sampling().top_k(), 5);
  EXPECT_FLOAT_EQ(r.sampling().top_p(), 0.9f);
  EXPECT_EQ(r.sampling().seed(), 7u);
  EXPECT_EQ(r.sampling().max_tokens(), 4);
  ASSERT_EQ(r.sampling().stop_size(), 1);
  EXPECT_EQ(r.sampling().stop(0), "END");
  EXPECT_EQ(r.sampling().stop_encoding(), v1::STOP_ENCODING_UTF8);
}

TEST_F(ClientTest, GenerateSendsStopsAsHexWhenOneIsNotUtf8) {
  const Outcome run =
      Client({"generate", "--stop=\xff", "--stop=ok", "--stop_hex=0A", "x"});
  EXPECT_EQ(run.code, kExitOk) << run.err;
  const auto requests = service_.generate_requests();
  ASSERT_EQ(requests.size(), 1u);
  const v1::SamplingParams& s = requests[0].sampling();
  EXPECT_EQ(s.stop_encoding(), v1::STOP_ENCODING_HEX);
  ASSERT_EQ(s.stop_size(), 3);
  EXPECT_EQ(s.stop(0), "ff");
  EXPECT_EQ(s.stop(1), "6f6b");
  EXPECT_EQ(s.stop(2), "0a");
}

TEST_F(ClientTest, GenerateRejectsMalformedStopHexBeforeCalling) {
  const Outcome run = Client({"generate", "--stop_hex=0g", "x"});
  EXPECT_EQ(run.code, kExitUsage);
  EXPECT_THAT(run.err, HasSubstr("--stop_hex=0g is not hex digits"));
  EXPECT_TRUE(service_.generate_requests().empty());
}

TEST_F(ClientTest, GenerateReadsPromptFromStdinForDash) {
  const Outcome run =
      Client({"generate", "--session=s9", "-"}, std::string("a\0b\n", 4));
  EXPECT_EQ(run.code, kExitOk) << run.err;
  ASSERT_EQ(service_.generate_requests().size(), 1u);
  EXPECT_EQ(service_.generate_requests()[0].text(), std::string("a\0b\n", 4));
  EXPECT_EQ(service_.generate_requests()[0].session_id(), "s9");
}

TEST_F(ClientTest, GeneratePrintsIdsAndLogprobsBeforeTheFinishLine) {
  service_.tokens = {"A", "\n"};
  const Outcome run = Client({"generate", "--print_ids", "--logprobs", "x"});
  EXPECT_EQ(run.code, kExitOk) << run.err;
  EXPECT_TRUE(service_.generate_requests()[0].logprobs());
  EXPECT_EQ(run.out, "A\n");
  EXPECT_EQ(run.err,
            "[ids 100 101]\n"
            "[token id=100 logprob=-0.5000 text=\"A\"]\n"
            "[token id=101 logprob=-0.5000 text=\"\\n\"]\n"
            "[finish=length prompt_tokens=1 generated_tokens=2 position=71 "
            "ttft_ms=1.5]\n");
}

TEST_F(ClientTest, GenerateTopLogprobsPrintsTheAlternativesAfterEachToken) {
  service_.tokens = {"A", "\n"};
  const Outcome run =
      Client({"generate", "--logprobs", "--top_logprobs=2", "x"});
  EXPECT_EQ(run.code, kExitOk) << run.err;
  EXPECT_TRUE(service_.generate_requests()[0].logprobs());
  EXPECT_EQ(service_.generate_requests()[0].top_logprobs(), 2);
  EXPECT_EQ(run.err,
            "[token id=100 logprob=-0.5000 text=\"A\"]\n"
            "[alternative id=100 logprob=-0.5000 text=\"A\"]\n"
            "[alternative id=101 logprob=-1.5000 text=\"b\"]\n"
            "[token id=101 logprob=-0.5000 text=\"\\n\"]\n"
            "[alternative id=101 logprob=-0.5000 text=\"\\n\"]\n"
            "[alternative id=102 logprob=-1.5000 text=\"b\"]\n"
            "[finish=length prompt_tokens=1 generated_tokens=2 position=71 "
            "ttft_ms=1.5]\n");
}

TEST_F(ClientTest, GenerateReportsServerErrorStatus) {
  service_.generate_status = {grpc::StatusCode::INVALID_ARGUMENT,
                              "sampling.temperature must be >= 0"};
  const Outcome run = Client({"generate", "--temperature=-1", "x"});
  EXPECT_EQ(run.code, kExitFailure);
  EXPECT_EQ(run.err,
            "attnserve: INVALID_ARGUMENT: sampling.temperature must be >= 0\n");
}

TEST_F(ClientTest, GenerateFailsOnErrorAndCancelledFinish) {
  service_.reason = v1::FINISH_REASON_ERROR;
  service_.final_error = "engine stopped";
  Outcome run = Client({"generate", "x"});
  EXPECT_EQ(run.code, kExitFailure);
  EXPECT_THAT(run.err, HasSubstr("[finish=error "));
  EXPECT_THAT(run.err,
              HasSubstr("attnserve: generation failed: engine stopped\n"));

  service_.reason = v1::FINISH_REASON_CANCELLED;
  service_.final_error = "";
  run = Client({"generate", "x"});
  EXPECT_EQ(run.code, kExitFailure);
  EXPECT_THAT(run.err, HasSubstr("attnserve: generation cancelled\n"));
}

TEST_F(ClientTest, GenerateFailsReadablyWhenTheServerShutsDown) {
  service_.reason = v1::FINISH_REASON_SHUTDOWN;
  const Outcome run = Client({"generate", "x"});
  EXPECT_EQ(run.code, kExitFailure);
  EXPECT_EQ(run.out, std::string("Hello\xff\0", 7));
  EXPECT_EQ(run.err,
            "[finish=shutdown prompt_tokens=1 generated_tokens=4 position=71 "
            "ttft_ms=1.5]\n"
            "attnserve: generation stopped: the server is shutting down\n");
}

TEST_F(ClientTest, GenerateExitsZeroOnStop) {
  service_.reason = v1::FINISH_REASON_STOP;
  const Outcome run = Client({"generate", "x"});
  EXPECT_EQ(run.code, kExitOk);
  EXPECT_THAT(run.err, StartsWith("[finish=stop "));
}

TEST_F(ClientTest, ChatRunsOneTurnPerLineOnOneSessionAndClosesIt) {
  service_.tokens = {"o", "k"};
  const Outcome run =
      Client({"chat", "--model=tiny", "--max_tokens=2"}, "hi\nthere\n");
  EXPECT_EQ(run.code, kExitOk) << run.err;
  EXPECT_EQ(run.out, "ok\nok\n");
  ASSERT_EQ(service_.create_requests().size(), 1u);
  EXPECT_EQ(service_.create_requests()[0].model(), "tiny");
  const auto requests = service_.generate_requests();
  ASSERT_EQ(requests.size(), 2u);
  EXPECT_EQ(requests[0].session_id(), "s1");
  EXPECT_EQ(requests[0].text(), "hi\n");
  EXPECT_EQ(requests[1].session_id(), "s1");
  EXPECT_EQ(requests[1].text(), "there\n");
  EXPECT_EQ(requests[1].sampling().max_tokens(), 2);
  EXPECT_EQ(service_.closed(), std::vector<std::string>{"s1"});
}

TEST_F(ClientTest, ChatOnAGivenSessionNeitherCreatesNorClosesIt) {
  service_.tokens = {"yes\n"};
  const Outcome run = Client({"chat", "--session=mine"}, "q");
  EXPECT_EQ(run.code, kExitOk) << run.err;
  EXPECT_EQ(run.out, "yes\n");  // already ends with a newline: none added
  EXPECT_TRUE(service_.create_requests().empty());
  EXPECT_TRUE(service_.closed().empty());
  ASSERT_EQ(service_.generate_requests().size(), 1u);
  EXPECT_EQ(service_.generate_requests()[0].session_id(), "mine");
}

TEST_F(ClientTest, ChatStopsAtAFailedTurnAndStillClosesItsSession) {
  service_.generate_status = {grpc::StatusCode::FAILED_PRECONDITION,
                              "turn in flight"};
  const Outcome run = Client({"chat"}, "a\nb\n");
  EXPECT_EQ(run.code, kExitFailure);
  EXPECT_THAT(run.err,
              HasSubstr("attnserve: FAILED_PRECONDITION: turn in flight"));
  EXPECT_EQ(service_.generate_requests().size(), 1u);
  EXPECT_EQ(service_.closed(), std::vector<std::string>{"s1"});
}

TEST_F(ClientTest, SessionsCreatePrintsTheIdAlone) {
  const Outcome run = Client({"sessions", "create", "--model=tiny",
                              "--attention=taylor", "--order=4", "--ttl=60"});
  EXPECT_EQ(run.code, kExitOk) << run.err;
  EXPECT_EQ(run.out, "s1\n");
  ASSERT_EQ(service_.create_requests().size(), 1u);
  const v1::CreateSessionRequest r = service_.create_requests()[0];
  EXPECT_EQ(r.model(), "tiny");
  EXPECT_EQ(r.attention_module(), "taylor");
  EXPECT_EQ(r.attention_order(), 4);
  EXPECT_EQ(r.ttl_seconds(), 60);
}

TEST_F(ClientTest, SessionsGetListAndClose) {
  ASSERT_EQ(Client({"sessions", "create"}).out, "s1\n");
  Outcome run = Client({"sessions", "get", "s1"});
  EXPECT_EQ(run.code, kExitOk) << run.err;
  EXPECT_THAT(run.out, HasSubstr("position:   76 tokens\n"));
  EXPECT_THAT(run.out, HasSubstr("state:      3.0 MiB (3145728 bytes)\n"));
  EXPECT_THAT(run.out, HasSubstr("attention:  taylor (order 2)\n"));
  EXPECT_THAT(run.out, HasSubstr("created:    2023-11-14 22:13:20 UTC ("));
  EXPECT_THAT(run.out, HasSubstr("last used:  2023-11-14 22:14:20 UTC ("));

  run = Client({"sessions", "list"});
  EXPECT_EQ(run.code, kExitOk) << run.err;
  EXPECT_THAT(
      run.out,
      StartsWith("ID  MODEL  ATTENTION         POSITION  STATE    CREATED"));
  EXPECT_THAT(run.out,
              HasSubstr("\ns1  tiny   taylor (order 2)  76        3.0 MiB  "));
  EXPECT_THAT(run.out, HasSubstr("h ago  no\n"));  // last used, busy

  run = Client({"sessions", "close", "s1"});
  EXPECT_EQ(run.code, kExitOk) << run.err;
  EXPECT_EQ(run.out, "closed s1\n");
  EXPECT_EQ(Client({"sessions", "list"}).out, "no sessions\n");

  run = Client({"sessions", "get", "s1"});
  EXPECT_EQ(run.code, kExitFailure);
  EXPECT_EQ(run.err, "attnserve: NOT_FOUND: session 's1' not found\n");
}

TEST_F(ClientTest, ModelsListAndDescribe) {
  Outcome run = Client({"models"});
  EXPECT_EQ(run.code, kExitOk) << run.err;
  EXPECT_EQ(run.out,
            "NAME  ATTENTION  PARAMS  STATE@1K   STATE@16K  BREAK-EVEN\n"
            "tiny  taylor     1.23M   306.0 KiB  306.0 KiB  82\n");
  run = Client({"models", "tiny"});
  EXPECT_EQ(run.code, kExitOk) << run.err;
  EXPECT_THAT(run.out, HasSubstr("attention:           taylor (order 2)\n"));
  EXPECT_THAT(run.out, HasSubstr("parameters:          1.23M (1234567)\n"));
  EXPECT_THAT(run.out,
              HasSubstr("state/session @16k:  306.0 KiB (313344 bytes)\n"));
  EXPECT_THAT(run.out, HasSubstr("break-even context:  82 tokens\n"));
  EXPECT_THAT(run.out,
              HasSubstr("config:              2 layers, dim 64, 4 heads x "
                        "head_dim 16, mlp_hidden 172\n"));
  EXPECT_THAT(run.out, HasSubstr("max_context 1048576 (default)"));
  EXPECT_THAT(run.out, HasSubstr("tokenizer:           bytes, 259 tokens, BOS 256, EOS 257\n"));
  EXPECT_THAT(run.out, HasSubstr("kv heads:            4\n"));
  // One kind of layer: no rows by kind.
  EXPECT_THAT(run.out, Not(HasSubstr("state by kind")));
  run = Client({"models", "huge"});
  EXPECT_EQ(run.code, kExitFailure);
  EXPECT_EQ(run.err, "attnserve: NOT_FOUND: unknown model 'huge'\n");
}

TEST_F(ClientTest, DescribeGivesAHybridsStateByLayerKind) {
  Outcome run = Client({"models", "tiny-hybrid"});
  EXPECT_EQ(run.code, kExitOk) << run.err;
  EXPECT_THAT(run.out, HasSubstr("break-even context:  142 tokens\n"
                                 "state by kind:       4 mamba2 layers: 283.0 KiB at any length\n"
                                 "                     2 attention layers: 1.0 MiB at 1k, 32.0 MiB at 32k\n"
                                 "tokenizer:  "));
}

TEST_F(ClientTest, TokenizePrintsEachTokensIdAndBytes) {
  Outcome run = Client({"tokenize", "a\n"});
  EXPECT_EQ(run.code, kExitOk) << run.err;
  EXPECT_EQ(run.out,
            "ID   TEXT\n"
            "256  \"\"\n"
            "97   \"a\"\n"
            "10   \"\\n\"\n"
            "3 tokens (model tiny)\n");
  run = Client({"tokenize", "--session=s1", "b"});
  EXPECT_EQ(run.code, kExitOk) << run.err;
  EXPECT_EQ(run.out, "ID  TEXT\n98  \"b\"\n1 tokens (model tiny)\n");
  run = Client({"tokenize", "--session=s9", "b"});
  EXPECT_EQ(run.code, kExitFailure);
  EXPECT_EQ(run.err, "attnserve: NOT_FOUND: session 's9' not found\n");
  run = Client({"tokenize"});
  EXPECT_EQ(run.code, kExitUsage);
}

TEST_F(ClientTest, HealthExitsZeroOnlyWhenServing) {
  Outcome run = Client({"health"});
  EXPECT_EQ(run.code, kExitOk);
  EXPECT_EQ(run.out, "SERVING\n");
  health_.status = health::HealthCheckResponse::NOT_SERVING;
  run = Client({"health"});
  EXPECT_EQ(run.code, kExitFailure);
  EXPECT_EQ(run.out, "NOT_SERVING\n");
}

TEST_F(ClientTest, AnApiKeyGoesOnEveryCallAsABearerHeader) {
  ASSERT_EQ(Client({"--api_key=flag-key-0123456789abcdef", "sessions", "create"}).code, kExitOk);
  ASSERT_EQ(Client({"sessions", "get", "s1", "--api_key=after-key-0123456789abcd"}).code,
            kExitOk);
  ASSERT_EQ(Client({"sessions", "list"}).code, kExitOk);  // no key: no header
  // From the environment, the way a key should be given (argv is visible to others).
  std::istringstream in;
  Io io;
  io.out = std::tmpfile();
  io.err = std::tmpfile();
  io.in = &in;
  io.env = [](const std::string& name) -> std::optional<std::string> {
    if (name == "ATTNSERVE_API_KEY") return "env-key-0123456789abcdef";
    return std::nullopt;
  };
  const int code = RunClient({server_flag_, "generate", "hi"}, io);
  ReadAll(io.out);
  EXPECT_EQ(code, kExitOk) << ReadAll(io.err);
  const std::vector<Call> calls = service_.calls();
  ASSERT_EQ(calls.size(), 4u);
  EXPECT_EQ(calls[0].authorization, "Bearer flag-key-0123456789abcdef");
  EXPECT_EQ(calls[1].authorization, "Bearer after-key-0123456789abcd");
  EXPECT_EQ(calls[2].authorization, std::nullopt);
  EXPECT_EQ(calls[3].method, "Generate");
  EXPECT_EQ(calls[3].authorization, "Bearer env-key-0123456789abcdef");
  // --help lists the flag and its variable, never a key's value.
  const Outcome help = RunArgs({"--help"});
  EXPECT_THAT(help.out, HasSubstr("--api_key="));
  EXPECT_THAT(help.out, HasSubstr("ATTNSERVE_API_KEY"));
}

TEST_F(ClientTest, GlobalFlagsAlsoWorkAfterTheCommand) {
  const Outcome run = RunArgs({"health", server_flag_, "--timeout=5"});
  EXPECT_EQ(run.code, kExitOk) << run.err;
  EXPECT_EQ(run.out, "SERVING\n");
}

TEST_F(ClientTest, BenchCountsTokensTurnsAndLatencies) {
  const Outcome run = Client(
      {"bench", "--sessions=3", "--turns=2", "--max_tokens=4", "--json"});
  EXPECT_EQ(run.code, kExitOk) << run.err;
  EXPECT_THAT(run.out,
              StartsWith("{\"sessions\":3,\"turns\":2,\"max_tokens\":4,"));
  EXPECT_THAT(run.out, HasSubstr("\"generated_tokens\":24,"));
  EXPECT_THAT(run.out,
              HasSubstr(",\"count\":6},\"itl_ms\":"));  // one TTFT per turn
  EXPECT_THAT(run.out,
              HasSubstr(",\"count\":18},\"errors\":0,\"retries\":0,"
                        "\"continuations\":0}\n"));  // 3 gaps per turn
  EXPECT_EQ(service_.create_requests().size(), 3u);
  EXPECT_EQ(service_.closed().size(), 3u);
  const auto requests = service_.generate_requests();
  ASSERT_EQ(requests.size(), 6u);
  for (const v1::GenerateRequest& r : requests) {
    EXPECT_EQ(r.sampling().temperature(), 0.0f);
    EXPECT_EQ(r.sampling().max_tokens(), 4);
    EXPECT_EQ(r.text(), "Once upon a time");
  }
}

TEST_F(ClientTest, BenchCountsFailedTurnsAsErrors) {
  service_.generate_status = {grpc::StatusCode::RESOURCE_EXHAUSTED, "full"};
  const Outcome run = Client({"bench", "--sessions=2", "--turns=2"});
  EXPECT_EQ(run.code, kExitFailure);
  EXPECT_THAT(run.out, HasSubstr("errors             4\n"));
  EXPECT_EQ(run.err, "first error: attnserve: RESOURCE_EXHAUSTED: full\n");
}

TEST(ClientUnreachableTest, SaysSoAndExitsThree) {
  const std::string address = "127.0.0.1:" + std::to_string(UnusedPort());
  for (const char* command : {"health", "generate", "models"}) {
    std::vector<std::string> args = {"--server=" + address,
                                     "--connect_timeout=0.2", command};
    if (std::string(command) == "generate") args.push_back("x");
    const Outcome run = RunArgs(args);
    EXPECT_EQ(run.code, kExitUnreachable) << command;
    EXPECT_THAT(run.err,
                StartsWith("cannot reach attnserve at " + address + ": "))
        << command;
    EXPECT_EQ(std::count(run.err.begin(), run.err.end(), '\n'), 1) << run.err;
  }
}

TEST(ClientTlsTest, UnreadableTlsFileExitsOneNamingIt) {
  const std::string server = "--server=127.0.0.1:" + std::to_string(UnusedPort());
  for (const char* flag : {"tls_ca", "tls_cert"}) {
    std::vector<std::string> args = {server, "health"};
    const std::string missing = "/nonexistent/attnserve-" + std::string(flag) + ".pem";
    args.push_back("--" + std::string(flag) + "=" + missing);
    if (std::string(flag) == "tls_cert") args.push_back("--tls_key=" + missing);
    const Outcome run = RunArgs(args);
    EXPECT_EQ(run.code, kExitFailure) << flag;
    EXPECT_EQ(run.err, "attnserve: cannot read --" + std::string(flag) + " file " + missing +
                           ": No such file or directory\n");
  }
  const Outcome run = RunArgs({server, "--tls_cert=c.pem", "health"});
  EXPECT_EQ(run.code, kExitFailure);
  EXPECT_THAT(run.err, HasSubstr("--tls_cert and --tls_key go together"));
}

TEST(ClientUsageTest, BadCommandLinesExitTwoWithoutConnecting) {
  // Nothing listens at this address: reaching it would be exit code 3, not 2.
  const std::string server =
      "--server=127.0.0.1:" + std::to_string(UnusedPort());
  Outcome run = RunArgs({server, "frobnicate"});
  EXPECT_EQ(run.code, kExitUsage);
  EXPECT_THAT(run.err, HasSubstr("unknown command \"frobnicate\""));
  run = RunArgs({server, "generate", "--bogus", "x"});
  EXPECT_EQ(run.code, kExitUsage);
  EXPECT_THAT(run.err, HasSubstr("unknown flag --bogus"));
  run = RunArgs({server, "generate"});
  EXPECT_EQ(run.code, kExitUsage);
  EXPECT_THAT(run.err,
              HasSubstr("missing arguments; usage: generate [flags] PROMPT"));
  run = RunArgs({server, "generate", "a", "b"});
  EXPECT_EQ(run.code, kExitUsage);
  EXPECT_THAT(run.err, HasSubstr("unexpected argument \"b\""));
  run = RunArgs({server, "bench", "--sessions=0"});
  EXPECT_EQ(run.code, kExitUsage);
  run = RunArgs({});
  EXPECT_EQ(run.code, kExitUsage);
}

TEST(ClientUsageTest, HelpGoesToStdoutAndExitsZero) {
  Outcome run = RunArgs({"--help"});
  EXPECT_EQ(run.code, kExitOk);
  EXPECT_THAT(run.out,
              StartsWith("usage: attnserve_client [global flags] <command>"));
  EXPECT_THAT(run.out, HasSubstr("ATTNSERVE_SERVER"));
  run = RunArgs({"help", "bench"});
  EXPECT_EQ(run.code, kExitOk);
  EXPECT_THAT(
      run.out,
      StartsWith("usage: attnserve_client [global flags] bench [flags]"));
  EXPECT_THAT(run.out, HasSubstr("--sessions=N"));
  run = RunArgs({"sessions", "close", "-h"});
  EXPECT_EQ(run.code, kExitOk);
  EXPECT_THAT(
      run.out,
      StartsWith("usage: attnserve_client [global flags] sessions close ID"));
}

// Global flags mirror ATTNSERVE_<NAME> before the command, except the client's
// own certificate and key (ATTNSERVE_TLS_CERT/KEY are the server's); after the
// command they read no environment.
TEST(GlobalFlagsTest, MirrorTheEnvironmentOnlyBeforeTheCommand) {
  const EnvLookup env = [](const std::string& name) -> std::optional<std::string> {
    if (name == "ATTNSERVE_SERVER") return "env-host:1";
    if (name == "ATTNSERVE_TLS_CERT") return "server.pem";
    if (name == "ATTNSERVE_TLS_CLIENT_CERT") return "client.pem";
    if (name == "ATTNSERVE_TLS_CLIENT_KEY") return "client.key";
    return std::nullopt;
  };
  GlobalOptions top;
  FlagSet top_flags;
  AddGlobalFlags(&top_flags, &top, /*top_level=*/true);
  ASSERT_TRUE(top_flags.Parse({}, env).ok());
  EXPECT_EQ(top.server, "env-host:1");
  EXPECT_EQ(top.tls_cert, "client.pem");
  EXPECT_EQ(top.tls_key, "client.key");
  EXPECT_THAT(top_flags.Help(), HasSubstr("env ATTNSERVE_TLS_CLIENT_CERT"));

  GlobalOptions after;
  FlagSet after_flags;
  AddGlobalFlags(&after_flags, &after, /*top_level=*/false);
  ASSERT_TRUE(after_flags.Parse({"--tls_key=k.pem"}, env).ok());
  EXPECT_EQ(after.server, GlobalOptions().server);
  EXPECT_EQ(after.tls_cert, "");
  EXPECT_EQ(after.tls_key, "k.pem");
  EXPECT_EQ(after_flags.Help(), "");
}

}  // namespace
}  // namespace attnserve::client::test
