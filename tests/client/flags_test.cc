#include "client/flags.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

namespace attnserve::client {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

EnvLookup Env(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
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

TEST_F(FlagSetTest, ErrorsNameTheFlagAndTheProblem) {
  EXPECT_EQ(Parse({"--nope=1"}).status().message(), "unknown flag --nope");
  EXPECT_EQ(Parse({"--count=abc"}).status().message(),
            "--count: \"abc\" is not a 32-bit integer");
  EXPECT_EQ(Parse({"--count=3000000000"}).status().message(),
            "--count: \"3000000000\" is not a 32-bit integer");
  EXPECT_EQ(Parse({"--seed=-1"}).status().message(),
            "--seed: \"-1\" is not a non-negative integer");
  EXPECT_EQ(Parse({"--verbose=maybe"}).status().message(),
            "--verbose: \"maybe\" is not true or false");
  EXPECT_EQ(Parse({"--name"}).status().message(), "flag --name needs a value");
  EXPECT_EQ(Parse({}, {{"TEST_COUNT", "x"}}).status().message(),
            "TEST_COUNT: \"x\" is not a 32-bit integer");
}

TEST_F(FlagSetTest, HelpShowsValueKindDefaultsAndEnvironment) {
  flags_.Add("secret", &v_.big, "hidden");
  flags_.HideLast();
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
  EXPECT_THAT(help, HasSubstr("  --stop=S         repeatable (repeatable)\n"));
  EXPECT_THAT(help, ::testing::Not(HasSubstr("secret")));
}

}  // namespace
}  // namespace attnserve::client
