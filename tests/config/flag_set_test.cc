#include "server/config/flag_set.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"

namespace attnserve::config {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

EnvLookup Env(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](
             const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

struct Values {
  std::string name = "default";
  int32_t count = 3;
  int64_t big = 0;
  uint64_t seed = 0;
  float temperature = 0;
  double seconds = 1.5;
  bool verbose = false;
  bool color = true;
  std::vector<std::string> stop;
};

class FlagSetTest : public ::testing::Test {
 protected:
  FlagSetTest() {
    flags_.Add("name", &v_.name, "a name", "TEST_NAME");
    flags_.Add("count", &v_.count, "a count", "TEST_COUNT");
    flags_.Add("big", &v_.big, "a big count");
    flags_.Add("seed", &v_.seed, "a seed");
    flags_.Add("temperature", &v_.temperature, "a float");
    flags_.Add("seconds", &v_.seconds, "a double");
    flags_.Add("verbose", &v_.verbose, "a bool");
    flags_.Add("color", &v_.color, "a bool that defaults to true");
    flags_.Add("stop", &v_.stop, "repeatable");
  }
  absl::StatusOr<std::vector<std::string>> Parse(
      std::vector<std::string> args,
      std::map<std::string, std::string> env = {},
      bool stop_at_positional = false) {
    return flags_.Parse(args, Env(std::move(env)), stop_at_positional);
  }
  Values v_;
  FlagSet flags_;
};

TEST_F(FlagSetTest, ParsesEveryKindInBothSpellings) {
  auto rest = Parse({"--name=x", "--count", "-7", "--big=9000000000", "--seed",
                     "18446744073709551615", "--temperature=0.25", "--seconds",
                     "2", "--verbose", "--nocolor"});
  ASSERT_TRUE(rest.ok()) << rest.status();
  EXPECT_TRUE(rest->empty());
  EXPECT_EQ(v_.name, "x");
  EXPECT_EQ(v_.count, -7);
  EXPECT_EQ(v_.big, 9000000000);
  EXPECT_EQ(v_.seed, 18446744073709551615u);
  EXPECT_FLOAT_EQ(v_.temperature, 0.25f);
  EXPECT_DOUBLE_EQ(v_.seconds, 2);
  EXPECT_TRUE(v_.verbose);
  EXPECT_FALSE(v_.color);
}

TEST_F(FlagSetTest, KeepsPositionalsInOrderAndStopsFlagsAtDoubleDash) {
  auto rest =
      Parse({"a", "--stop=x", "-", "--stop", "y", "--", "--name=z", "b"});
  ASSERT_TRUE(rest.ok()) << rest.status();
  EXPECT_THAT(*rest, ElementsAre("a", "-", "--name=z", "b"));
  EXPECT_THAT(v_.stop, ElementsAre("x", "y"));
  EXPECT_EQ(v_.name, "default");
}

TEST_F(FlagSetTest, BoolsNeverTakeTheNextArgument) {
  auto rest = Parse({"--verbose", "prompt", "--color=false"});
  ASSERT_TRUE(rest.ok()) << rest.status();
  EXPECT_THAT(*rest, ElementsAre("prompt"));
  EXPECT_TRUE(v_.verbose);
  EXPECT_FALSE(v_.color);
}

TEST_F(FlagSetTest, StopAtPositionalLeavesTheRestUntouched) {
  auto rest = Parse({"--name=a", "cmd", "--bogus", "--name=b"}, {}, true);
  ASSERT_TRUE(rest.ok()) << rest.status();
  EXPECT_THAT(*rest, ElementsAre("cmd", "--bogus", "--name=b"));
  EXPECT_EQ(v_.name, "a");
}

TEST_F(FlagSetTest, CommandLineOverridesEnvironmentOverridesDefault) {
  auto rest =
      Parse({"--count=5"}, {{"TEST_NAME", "from-env"}, {"TEST_COUNT", "4"}});
  ASSERT_TRUE(rest.ok()) << rest.status();
  EXPECT_EQ(v_.name, "from-env");
  EXPECT_EQ(v_.count, 5);
}

TEST_F(FlagSetTest, EmptyVariableCountsAsUnsetAndABadOneIsIgnoredUnderAFlag) {
  auto rest = Parse({"--count=5"}, {{"TEST_NAME", ""}, {"TEST_COUNT", "x"}});
  ASSERT_TRUE(rest.ok()) << rest.status();
  EXPECT_EQ(v_.name, "default");
  EXPECT_EQ(v_.count, 5);
}

TEST_F(FlagSetTest, LaterRepeatsWin) {
  ASSERT_TRUE(Parse({"--count=5", "--count", "6"}).ok());
  EXPECT_EQ(v_.count, 6);
}

TEST_F(FlagSetTest, ErrorsNameTheFlagWhereTheValueCameFromAndTheProblem) {
  EXPECT_EQ(Parse({"--nope=1"}).status().message(), "unknown flag --nope");
  EXPECT_EQ(Parse({"--count=abc"}).status().message(),
            "--count: invalid value \"abc\" (from the command line): expected "
            "a 32-bit integer");
  EXPECT_EQ(Parse({"--count=3000000000"}).status().message(),
            "--count: invalid value \"3000000000\" (from the command line): "
            "expected a 32-bit integer");
  EXPECT_EQ(Parse({"--seed=-1"}).status().message(),
            "--seed: invalid value \"-1\" (from the command line): expected a "
            "non-negative integer");
  EXPECT_EQ(Parse({"--verbose=maybe"}).status().message(),
            "--verbose: invalid value \"maybe\" (from the command line): "
            "expected true or false");
  EXPECT_EQ(Parse({"--name"}).status().message(),
            "flag --name needs a value: --name=S");
  EXPECT_EQ(Parse({"--name", "--verbose"}).status().message(),
            "flag --name needs a value: --name=S");
  EXPECT_EQ(Parse({}, {{"TEST_COUNT", "x"}}).status().message(),
            "--count: invalid value \"x\" (from environment variable "
            "TEST_COUNT): expected a 32-bit integer");
  EXPECT_EQ(Parse({"--count=x"}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(FlagSetTest, HelpShowsValueKindDefaultsAndEnvironment) {
  flags_.Add("secret", &v_.big, "hidden").Hidden();
  const std::string help = flags_.Help();
  EXPECT_THAT(
      help,
      HasSubstr(
          "  --name=S         a name (default \"default\"; env TEST_NAME)\n"));
  EXPECT_THAT(
      help,
      HasSubstr("  --count=N        a count (default 3; env TEST_COUNT)\n"));
  EXPECT_THAT(help, HasSubstr("  --seconds=F      a double (default 1.5)\n"));
  EXPECT_THAT(help, HasSubstr("  --verbose        a bool\n"));
  EXPECT_THAT(help, HasSubstr("  --color          a bool that defaults to "
                              "true (default true)\n"));
  EXPECT_THAT(help, HasSubstr("  --stop=S         repeatable (repeatable)\n"));
  EXPECT_THAT(help, Not(HasSubstr("secret")));
}

TEST_F(FlagSetTest, HiddenFlagsStillParse) {
  flags_.Add("secret", &v_.big, "hidden").Hidden();
  ASSERT_TRUE(Parse({"--secret=7"}).ok());
  EXPECT_EQ(v_.big, 7);
}

TEST_F(FlagSetTest, DashHIsHelpOnlyWhenHelpIsDeclared) {
  auto rest = Parse({"-h"});
  ASSERT_TRUE(rest.ok());
  EXPECT_THAT(*rest, ElementsAre("-h"));
  bool help = false;
  flags_.Add("help", &help, "show this help");
  rest = Parse({"-h"});
  ASSERT_TRUE(rest.ok());
  EXPECT_TRUE(rest->empty());
  EXPECT_TRUE(help);
}

TEST(FlagSetEnvTest, EveryFlagMirrorsItsDerivedNameUnlessNamedOtherwise) {
  EXPECT_EQ(EnvVarFor("memory_budget"), "ATTNSERVE_MEMORY_BUDGET");
  std::string server, cert, local;
  FlagSet flags(FlagSet::kEnvForEveryFlag);
  flags.Add("server", &server, "derived");
  flags.Add("tls_cert", &cert, "explicit").Env("ATTNSERVE_TLS_CLIENT_CERT");
  flags.Add("local", &local, "none").Env("");
  auto rest = flags.Parse({}, Env({{"ATTNSERVE_SERVER", "h:1"},
                                   {"ATTNSERVE_TLS_CERT", "server.pem"},
                                   {"ATTNSERVE_TLS_CLIENT_CERT", "client.pem"},
                                   {"ATTNSERVE_LOCAL", "x"}}));
  ASSERT_TRUE(rest.ok()) << rest.status();
  EXPECT_EQ(server, "h:1");
  EXPECT_EQ(cert, "client.pem");
  EXPECT_EQ(local, "");
  const std::string help = flags.Help();
  EXPECT_THAT(help, HasSubstr("env ATTNSERVE_SERVER"));
  EXPECT_THAT(help, HasSubstr("env ATTNSERVE_TLS_CLIENT_CERT"));
  EXPECT_THAT(help, Not(HasSubstr("ATTNSERVE_LOCAL")));
}

TEST(FlagSetEnvTest, WithoutKEnvForEveryFlagOnlyNamedFlagsReadTheEnvironment) {
  std::string a, b;
  FlagSet flags;
  flags.Add("a", &a, "no mirror");
  flags.Add("b", &b, "derived on request").DerivedEnv();
  ASSERT_TRUE(
      flags.Parse({}, Env({{"ATTNSERVE_A", "x"}, {"ATTNSERVE_B", "y"}})).ok());
  EXPECT_EQ(a, "");
  EXPECT_EQ(b, "y");
}

TEST(FlagSetCustomTest, ParsesAndShowsByteSizesDurationsAddressesAndLists) {
  int64_t bytes = int64_t{2} << 30;
  absl::Duration ttl = absl::Minutes(30);
  std::string listen = "127.0.0.1:1";
  std::vector<std::string> dirs;
  int sessions = 4;
  FlagSet flags(FlagSet::kEnvForEveryFlag);
  flags.AddByteSize("budget", &bytes, "bytes");
  flags.AddDuration("ttl", &ttl, absl::Seconds(1), "duration");
  flags.AddHostPort("listen", &listen, "address");
  flags.AddCommaList("dirs", &dirs, "list", "none");
  flags.AddIntAtLeast("sessions", &sessions, 1, "count");
  const std::string help = flags.Help();
  EXPECT_THAT(help, HasSubstr("--budget=BYTES"));
  EXPECT_THAT(help, HasSubstr("(default 2GiB; env ATTNSERVE_BUDGET)"));
  EXPECT_THAT(help, HasSubstr("--ttl=DURATION"));
  EXPECT_THAT(help, HasSubstr("(default 30m; env ATTNSERVE_TTL)"));
  EXPECT_THAT(help, HasSubstr("--listen=HOST:PORT"));
  EXPECT_THAT(help, HasSubstr("(default 127.0.0.1:1; env ATTNSERVE_LISTEN)"));
  EXPECT_THAT(help, HasSubstr("(default none; env ATTNSERVE_DIRS)"));

  auto rest = flags.Parse(
      {"--budget=512MiB", "--ttl", "1h30m", "--dirs=a, ,b", "--sessions=2"},
      Env({{"ATTNSERVE_LISTEN", "[::]:9"}}));
  ASSERT_TRUE(rest.ok()) << rest.status();
  EXPECT_EQ(bytes, int64_t{512} << 20);
  EXPECT_EQ(ttl, absl::Minutes(90));
  EXPECT_EQ(listen, "[::]:9");
  EXPECT_THAT(dirs, ElementsAre("a", "b"));
  EXPECT_EQ(sessions, 2);
  EXPECT_EQ(flags.Describe("ttl"), "--ttl=1h30m (from the command line)");
  EXPECT_EQ(flags.Describe("listen"),
            "--listen=[::]:9 (from environment variable ATTNSERVE_LISTEN)");

  FlagSet fresh(FlagSet::kEnvForEveryFlag);
  int64_t untouched = 1000;
  fresh.AddByteSize("budget", &untouched, "bytes");
  ASSERT_TRUE(fresh.Parse({}, Env({})).ok());
  EXPECT_EQ(fresh.Describe("budget"), "--budget=1KB (default)");
}

TEST(FlagSetCustomTest, CustomErrorsKeepTheValueAndSayWhatWasExpected) {
  int64_t bytes = 1;
  absl::Duration ttl = absl::Seconds(5);
  std::string listen = "a:1";
  int sessions = 4;
  FlagSet flags(FlagSet::kEnvForEveryFlag);
  flags.AddByteSize("budget", &bytes, "bytes");
  flags.AddDuration("ttl", &ttl, absl::Seconds(1), "duration");
  flags.AddHostPort("listen", &listen, "address");
  flags.AddIntAtLeast("sessions", &sessions, 1, "count");
  EXPECT_THAT(flags.Parse({"--budget=lots"}, Env({})).status().message(),
              HasSubstr("expected a byte count"));
  EXPECT_THAT(flags.Parse({"--ttl=0.5s"}, Env({})).status().message(),
              HasSubstr("--ttl: invalid value \"0.5s\" (from the command "
                        "line): must be at least 1s"));
  EXPECT_THAT(
      flags.Parse({}, Env({{"ATTNSERVE_LISTEN", "nohost"}})).status().message(),
      HasSubstr("(from environment variable ATTNSERVE_LISTEN): "
                "expected host:port"));
  EXPECT_THAT(flags.Parse({"--sessions=0"}, Env({})).status().message(),
              HasSubstr("must be at least 1"));
  EXPECT_EQ(bytes, 1);
  EXPECT_EQ(ttl, absl::Seconds(5));
  EXPECT_EQ(listen, "a:1");
  EXPECT_EQ(sessions, 4);
}

TEST(FlagSetCustomTest, AddCustomUsesTheGivenParserAndRenderer) {
  bool each_turn = false;
  FlagSet flags;
  flags.AddCustom<bool>(
      "persist", &each_turn, "none|each_turn", "mode",
      [](absl::string_view v, bool* out) {
        if (v != "none" && v != "each_turn") {
          return absl::InvalidArgumentError("expected none or each_turn");
        }
        *out = v == "each_turn";
        return absl::OkStatus();
      },
      [](const bool& v) { return std::string(v ? "each_turn" : "none"); });
  EXPECT_THAT(flags.Help(),
              HasSubstr("--persist=none|each_turn  mode (default none)"));
  EXPECT_THAT(flags.Parse({"--persist=often"}, Env({})).status().message(),
              HasSubstr("expected none or each_turn"));
  ASSERT_TRUE(flags.Parse({"--persist", "each_turn"}, Env({})).ok());
  EXPECT_TRUE(each_turn);
}

TEST(FlagSetHelpTest, WrapsLongHelpAndMovesLongNamesToTheirOwnLine) {
  std::string a, b;
  FlagSet flags;
  flags.Add("a", &a,
            "one two three four five six seven eight nine ten eleven twelve "
            "thirteen fourteen fifteen sixteen seventeen eighteen");
  flags.Add("b", &b, "short")
      .ValueName("A_VERY_LONG_PLACEHOLDER_THAT_DOES_NOT_FIT");
  const std::string help = flags.Help();
  for (absl::string_view line : absl::StrSplit(help, '\n')) {
    EXPECT_LE(line.size(), 80u) << line;
  }
  EXPECT_THAT(help,
              HasSubstr("  --b=A_VERY_LONG_PLACEHOLDER_THAT_DOES_NOT_FIT\n"
                        "         short\n"));
}

// A tool's main(): --help exits 0, a bad command line exits 2 naming the
// program and the flag.
TEST(ParseFlagsOrExitTest, ExitsWithTheReasonOnABadCommandLine) {
  auto run = [](std::vector<std::string> args) {
    int count = 3;
    FlagSet flags;
    flags.Add("count", &count, "a count");
    std::vector<char*> argv;
    for (std::string& arg : args) argv.push_back(arg.data());
    ParseFlagsOrExit(flags, static_cast<int>(argv.size()), argv.data(),
                     "Usage: tool");
    std::exit(count == 4 ? 10 : 11);
  };
  EXPECT_EXIT(run({"/bin/tool", "--help"}), ::testing::ExitedWithCode(0), "");
  EXPECT_EXIT(run({"/bin/tool", "--count=4"}), ::testing::ExitedWithCode(10),
              "");
  EXPECT_EXIT(run({"/bin/tool", "--count=x"}), ::testing::ExitedWithCode(2),
              "tool: --count: invalid value \"x\" \\(from the command line\\)");
  EXPECT_EXIT(run({"/bin/tool", "--nope"}), ::testing::ExitedWithCode(2),
              "tool: unknown flag --nope \\(see --help\\)");
  EXPECT_EXIT(run({"/bin/tool", "stray"}), ::testing::ExitedWithCode(2),
              "unexpected argument \"stray\"");
}

}  // namespace
}  // namespace attnserve::config
