#include "server/config/server_options.h"

#include <cstdlib>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace attnserve::config {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

using Env = std::map<std::string, std::string>;

// Parses `args` (without the program name) against the variables in `env`.
absl::StatusOr<ServerOptions> Parse(const std::vector<std::string>& args,
                                    const Env& env = {}, bool* help = nullptr) {
  std::vector<std::string> storage = {"attnserve_server"};
  storage.insert(storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& arg : storage) argv.push_back(arg.data());
  argv.push_back(nullptr);
  bool ignored_help = false;
  return ParseServerOptions(
      static_cast<int>(storage.size()), argv.data(),
      [&env](const std::string& name) -> std::optional<std::string> {
        auto it = env.find(name);
        if (it == env.end()) return std::nullopt;
        return it->second;
      },
      help != nullptr ? help : &ignored_help);
}

// The message of a parse that must fail with InvalidArgument.
std::string ErrorOf(const std::vector<std::string>& args, const Env& env = {}) {
  absl::StatusOr<ServerOptions> options = Parse(args, env);
  EXPECT_EQ(options.status().code(), absl::StatusCode::kInvalidArgument)
      << options.status();
  return std::string(options.status().message());
}

// One non-default value per flag, and the check that all of them arrived.
const std::vector<std::pair<std::string, std::string>> kEveryFlag = {
    {"listen", "0.0.0.0:6000"},
    {"metrics_listen", "[::]:9000"},
    {"model_dirs", "/m/a,/m/b"},
    {"memory_budget", "512MiB"},
    {"max_sessions", "8"},
    {"max_prompt_tokens", "1000"},
    {"max_generated_tokens", "500"},
    {"default_max_tokens", "50"},
    {"default_ttl", "90s"},
    {"max_ttl", "2h"},
    {"threads", "4"},
    {"shutdown_grace", "3s"},
    {"api_keys_file", "/etc/attnserve/keys.txt"},
    {"http_listen", "0.0.0.0:8080"},
    {"http_max_streams", "10"},
    {"http_threads", "20"},
};

void ExpectEveryFlagApplied(const ServerOptions& options) {
  EXPECT_EQ(options.listen_address, "0.0.0.0:6000");
  EXPECT_EQ(options.metrics_address, "[::]:9000");
  EXPECT_THAT(options.model_dirs, ElementsAre("/m/a", "/m/b"));
  EXPECT_EQ(options.memory_budget_bytes, int64_t{512} << 20);
  EXPECT_EQ(options.max_sessions, 8);
  EXPECT_EQ(options.max_prompt_tokens, 1000);
  EXPECT_EQ(options.max_generated_tokens, 500);
  EXPECT_EQ(options.default_max_tokens, 50);
  EXPECT_EQ(options.default_ttl, absl::Seconds(90));
  EXPECT_EQ(options.max_ttl, absl::Hours(2));
  EXPECT_EQ(options.threads, 4);
  EXPECT_EQ(options.shutdown_grace, absl::Seconds(3));
  EXPECT_EQ(options.api_keys_file, "/etc/attnserve/keys.txt");
  EXPECT_EQ(options.http_listen, "0.0.0.0:8080");
  EXPECT_EQ(options.http_max_streams, 10);
  EXPECT_EQ(options.http_threads, 20);
}

std::string EnvName(const std::string& flag) {
  return "ATTNSERVE_" + absl::AsciiStrToUpper(flag);
}

TEST(ParseServerOptionsTest, DefaultsWithNoFlagsAndEmptyEnv) {
  bool help = true;
  absl::StatusOr<ServerOptions> options = Parse({}, {}, &help);
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_FALSE(help);
  EXPECT_EQ(options->listen_address, "127.0.0.1:50051");
  EXPECT_EQ(options->metrics_address, "127.0.0.1:9464");
  EXPECT_THAT(options->model_dirs, IsEmpty());
  EXPECT_EQ(options->memory_budget_bytes, int64_t{2} * 1024 * 1024 * 1024);
  EXPECT_EQ(options->max_sessions, 256);
  EXPECT_EQ(options->max_prompt_tokens, 8192);
  EXPECT_EQ(options->max_generated_tokens, 2048);
  EXPECT_EQ(options->default_max_tokens, 256);
  EXPECT_EQ(options->default_ttl, absl::Minutes(30));
  EXPECT_EQ(options->max_ttl, absl::Hours(24));
  EXPECT_EQ(options->threads, 1);
  EXPECT_EQ(options->shutdown_grace, absl::Seconds(10));
  EXPECT_EQ(options->api_keys_file, "");
  EXPECT_EQ(options->http_listen, "127.0.0.1:8000");
  EXPECT_EQ(options->http_max_streams, 64);
  EXPECT_EQ(options->http_threads, 0);
}

TEST(ParseServerOptionsTest, EmptyHttpListenOnTheCommandLineDisablesHttp) {
  absl::StatusOr<ServerOptions> options = Parse({"--http_listen="});
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->http_listen, "");
  EXPECT_THAT(ErrorOf({"--http_listen=8000"}), HasSubstr("--http_listen"));
}

TEST(ParseServerOptionsErrorTest, HttpThreadsMustExceedMaxStreams) {
  EXPECT_THAT(ErrorOf({"--http_max_streams=8", "--http_threads=8"}),
              AllOf(HasSubstr("--http_threads=8"), HasSubstr("--http_max_streams=8")));
  EXPECT_TRUE(Parse({"--http_max_streams=8", "--http_threads=9"}).ok());
}

TEST(ParseServerOptionsTest, ParsesEveryFlagInBothSyntaxes) {
  std::vector<std::string> joined;     // --name=value
  std::vector<std::string> separated;  // --name value
  for (const auto& [name, value] : kEveryFlag) {
    joined.push_back("--" + name + "=" + value);
    separated.insert(separated.end(), {"--" + name, value});
  }
  for (const auto& args : {joined, separated}) {
    absl::StatusOr<ServerOptions> options = Parse(args);
    ASSERT_TRUE(options.ok()) << args[0] << ": " << options.status();
    ExpectEveryFlagApplied(*options);
  }
}

TEST(ParseServerOptionsTest, ReadsEveryFlagFromEnvironmentWhenAbsent) {
  Env env;
  for (const auto& [name, value] : kEveryFlag) env[EnvName(name)] = value;
  absl::StatusOr<ServerOptions> options = Parse({}, env);
  ASSERT_TRUE(options.ok()) << options.status();
  ExpectEveryFlagApplied(*options);
}

TEST(ParseServerOptionsTest, FlagWinsOverEnvironment) {
  // ATTNSERVE_MAX_SESSIONS is never parsed: the flag replaces it.
  absl::StatusOr<ServerOptions> options =
      Parse({"--max_sessions=7", "--listen", "10.0.0.1:1"},
            {{"ATTNSERVE_MAX_SESSIONS", "not a number"},
             {"ATTNSERVE_LISTEN", "10.0.0.2:2"},
             {"ATTNSERVE_THREADS", "6"}});
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->max_sessions, 7);
  EXPECT_EQ(options->listen_address, "10.0.0.1:1");
  EXPECT_EQ(options->threads, 6);  // Not on the command line.
}

TEST(ParseServerOptionsTest, EmptyEnvironmentVariableCountsAsUnset) {
  absl::StatusOr<ServerOptions> options = Parse(
      {}, {{"ATTNSERVE_MAX_SESSIONS", ""}, {"ATTNSERVE_MEMORY_BUDGET", ""}});
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->max_sessions, 256);
  EXPECT_EQ(options->memory_budget_bytes, int64_t{2} << 30);
}

TEST(ParseServerOptionsTest, LaterRepeatOfAFlagWins) {
  absl::StatusOr<ServerOptions> options =
      Parse({"--threads=3", "--threads", "5"});
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->threads, 5);
}

TEST(ParseServerOptionsTest, SplitsModelDirsOnCommasAndTrims) {
  absl::StatusOr<ServerOptions> options = Parse({"--model_dirs= /a , ,/b/c,"});
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_THAT(options->model_dirs, ElementsAre("/a", "/b/c"));
  options = Parse({"--model_dirs="});
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_THAT(options->model_dirs, IsEmpty());
}

TEST(ParseServerOptionsTest, ParsesByteSizeSuffixes) {
  const std::vector<std::pair<std::string, int64_t>> cases = {
      {"123456", 123456},
      {"512MiB", int64_t{512} << 20},
      {"2GiB", int64_t{2} << 30},
      {"64KiB", 64 * 1024},
      {"3KB", 3000},
      {"5MB", 5'000'000},
      {"2GB", 2'000'000'000},
      {"1gib", int64_t{1} << 30},
      {"8 MiB", int64_t{8} << 20},
  };
  for (const auto& [text, bytes] : cases) {
    absl::StatusOr<ServerOptions> options = Parse({"--memory_budget=" + text});
    ASSERT_TRUE(options.ok()) << text << ": " << options.status();
    EXPECT_EQ(options->memory_budget_bytes, bytes) << text;
  }
}

TEST(ParseServerOptionsTest, ParsesDurations) {
  absl::StatusOr<ServerOptions> options =
      Parse({"--default_ttl=45m", "--max_ttl", "1h30m", "--shutdown_grace=0s"});
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->default_ttl, absl::Minutes(45));
  EXPECT_EQ(options->max_ttl, absl::Minutes(90));
  EXPECT_EQ(options->shutdown_grace, absl::ZeroDuration());
}

TEST(ParseServerOptionsTest, HelpReturnsDefaultsAndSetsHelp) {
  for (const std::string& flag : std::vector<std::string>{"--help", "-h"}) {
    bool help = false;
    // Everything else, even a bad flag, is ignored when help is asked for.
    absl::StatusOr<ServerOptions> options =
        Parse({"--max_sessions=3", flag, "--bogus"},
              {{"ATTNSERVE_THREADS", "9"}}, &help);
    ASSERT_TRUE(options.ok()) << flag << ": " << options.status();
    EXPECT_TRUE(help) << flag;
    EXPECT_EQ(options->max_sessions, 256) << flag;
    EXPECT_EQ(options->threads, 1) << flag;
  }
}

TEST(ParseServerOptionsErrorTest, UnknownFlagOrArgumentIsNamed) {
  EXPECT_THAT(ErrorOf({"--max_session=3"}),
              AllOf(HasSubstr("unknown flag"), HasSubstr("--max_session")));
  EXPECT_THAT(ErrorOf({"serve"}), HasSubstr("unexpected argument \"serve\""));
  EXPECT_THAT(ErrorOf({"-x"}), HasSubstr("unexpected argument \"-x\""));
}

TEST(ParseServerOptionsErrorTest, MissingValueNamesTheFlag) {
  EXPECT_THAT(ErrorOf({"--max_sessions"}),
              AllOf(HasSubstr("--max_sessions"), HasSubstr("needs a value")));
  EXPECT_THAT(ErrorOf({"--listen", "--threads=2"}),
              AllOf(HasSubstr("--listen"), HasSubstr("needs a value")));
}

TEST(ParseServerOptionsErrorTest, BadNumberNamesFlagValueAndCommandLine) {
  EXPECT_THAT(
      ErrorOf({"--max_sessions=lots"}),
      AllOf(HasSubstr("--max_sessions"), HasSubstr("\"lots\""),
            HasSubstr("command line"), HasSubstr("expected an integer")));
  EXPECT_THAT(ErrorOf({"--threads=2.5"}), HasSubstr("--threads"));
}

TEST(ParseServerOptionsErrorTest, ZeroOrNegativeLimitsNameTheFlag) {
  for (const std::string& name : std::vector<std::string>{
           "max_sessions", "max_prompt_tokens", "max_generated_tokens",
           "default_max_tokens", "threads"}) {
    for (const std::string& value : std::vector<std::string>{"0", "-1"}) {
      EXPECT_THAT(
          ErrorOf({"--" + name, value}),
          AllOf(HasSubstr("--" + name), HasSubstr("must be at least 1")))
          << name << "=" << value;
    }
  }
}

TEST(ParseServerOptionsErrorTest, DefaultMaxTokensAboveMaxGeneratedNamesBoth) {
  EXPECT_THAT(
      ErrorOf({"--default_max_tokens=300", "--max_generated_tokens=200"}),
      AllOf(HasSubstr("--default_max_tokens=300 (from the command line)"),
            HasSubstr("must not exceed"),
            HasSubstr("--max_generated_tokens=200 (from the command line)")));
  // Against the default limit (2048), with the value from the environment.
  EXPECT_THAT(ErrorOf({}, {{"ATTNSERVE_DEFAULT_MAX_TOKENS", "4096"}}),
              AllOf(HasSubstr("ATTNSERVE_DEFAULT_MAX_TOKENS"),
                    HasSubstr("--max_generated_tokens=2048 (default)")));
}

TEST(ParseServerOptionsErrorTest, DefaultTtlAboveMaxTtlNamesBoth) {
  EXPECT_THAT(ErrorOf({"--max_ttl=10m"}),
              AllOf(HasSubstr("--default_ttl=30m (default)"),
                    HasSubstr("must not exceed"), HasSubstr("--max_ttl=10m")));
}

TEST(ParseServerOptionsErrorTest, BadByteSizesNameTheFlag) {
  for (const std::string& value :
       std::vector<std::string>{"512XB", "MiB", "-1GiB", "1.5GiB", "12 bytes",
                                "0", "0MiB", "9999999999GiB"}) {
    EXPECT_THAT(
        ErrorOf({"--memory_budget=" + value}),
        AllOf(HasSubstr("--memory_budget"), HasSubstr("\"" + value + "\"")))
        << value;
  }
}

TEST(ParseServerOptionsErrorTest, BadDurationsNameTheFlag) {
  EXPECT_THAT(
      ErrorOf({"--default_ttl=30 minutes"}),
      AllOf(HasSubstr("--default_ttl"), HasSubstr("expected a duration")));
  EXPECT_THAT(ErrorOf({"--max_ttl=0s"}),
              AllOf(HasSubstr("--max_ttl"), HasSubstr("must be at least 1s")));
  EXPECT_THAT(ErrorOf({"--max_ttl=inf"}),
              AllOf(HasSubstr("--max_ttl"), HasSubstr("must be finite")));
  EXPECT_THAT(ErrorOf({"--shutdown_grace=-1s"}), HasSubstr("--shutdown_grace"));
}

TEST(ParseServerOptionsErrorTest, AddressWithoutPortNamesTheFlag) {
  EXPECT_THAT(ErrorOf({"--metrics_listen=localhost"}),
              AllOf(HasSubstr("--metrics_listen"), HasSubstr("host:port")));
}

TEST(ParseServerOptionsErrorTest, BadEnvironmentValueNamesTheVariable) {
  EXPECT_THAT(ErrorOf({}, {{"ATTNSERVE_MAX_SESSIONS", "abc"}}),
              AllOf(HasSubstr("--max_sessions"), HasSubstr("\"abc\""),
                    HasSubstr("environment variable ATTNSERVE_MAX_SESSIONS")));
  EXPECT_THAT(ErrorOf({}, {{"ATTNSERVE_MEMORY_BUDGET", "2 lots"}}),
              HasSubstr("environment variable ATTNSERVE_MEMORY_BUDGET"));
  EXPECT_THAT(ErrorOf({}, {{"ATTNSERVE_SHUTDOWN_GRACE", "soon"}}),
              HasSubstr("environment variable ATTNSERVE_SHUTDOWN_GRACE"));
}

TEST(ServerUsageTest, ListsEveryFlagWithEnvVarAndDefault) {
  const std::string usage = ServerUsage("attnserve_server");
  EXPECT_THAT(usage, HasSubstr("Usage: attnserve_server "));
  EXPECT_THAT(usage, HasSubstr("--help"));
  for (const auto& [name, value] : kEveryFlag) {
    EXPECT_THAT(usage, HasSubstr("--" + name + "=")) << name;
    EXPECT_THAT(usage, HasSubstr(EnvName(name))) << name;
  }
  for (const std::string& default_text : std::vector<std::string>{
           "default 127.0.0.1:50051", "default 127.0.0.1:9464", "default 2GiB",
           "default 256", "default 8192", "default 2048", "default 30m",
           "default 24h", "default 10s", "default 1;"}) {
    EXPECT_THAT(usage, HasSubstr(default_text));
  }
}

TEST(GetEnvTest, ReadsTheProcessEnvironment) {
  const std::string name = "ATTNSERVE_CONFIG_TEST_ONLY_VARIABLE";
  ASSERT_EQ(unsetenv(name.c_str()), 0);
  EXPECT_EQ(GetEnv(name), std::nullopt);
  ASSERT_EQ(setenv(name.c_str(), "42", /*overwrite=*/1), 0);
  EXPECT_EQ(GetEnv(name), std::optional<std::string>("42"));
  unsetenv(name.c_str());
}

}  // namespace
}  // namespace attnserve::config
