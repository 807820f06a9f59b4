#include "server/service/api_keys.h"

#include <gtest/gtest.h>

namespace attnserve::service {
namespace {

using Metadata = std::multimap<grpc::string_ref, grpc::string_ref>;

constexpr char kAliceKey[] = "alice-0123456789abcdef";
constexpr char kBobKey[] = "bob+/0123456789ABCDEF==";

Metadata Bearer(const std::string& value) {
  static std::vector<std::unique_ptr<std::string>> keep;  // string_ref does not own
  keep.push_back(std::make_unique<std::string>(value));
  return Metadata{{"authorization", *keep.back()}};
}

TEST(ApiKeysTest, ParsesKeysTenantsLimitsCommentsAndBlankLines) {
  const std::string text = absl::StrCat(
      "# tenants of the staging cluster\n"
      "\n",
      kAliceKey, "  alice   # the research team\n",                             //
      "\t", kBobKey, "\tbob max_sessions=3 max_state_bytes=64MiB\r\n",         // CRLF
      "bob-rotated-key-000000 bob max_state_bytes=67108864 max_sessions=3\n");  // rotation
  auto keys = ApiKeys::Parse(text, "keys.txt");
  ASSERT_TRUE(keys.ok()) << keys.status();
  EXPECT_TRUE(keys->enabled());
  EXPECT_EQ(keys->key_count(), 3);
  EXPECT_EQ(keys->tenant_count(), 2);
  const auto& limits = keys->limits();
  EXPECT_EQ(limits.at("alice").max_sessions, 0);
  EXPECT_EQ(limits.at("alice").max_state_bytes, 0);
  EXPECT_EQ(limits.at("bob").max_sessions, 3);
  EXPECT_EQ(limits.at("bob").max_state_bytes, int64_t{64} << 20);
  EXPECT_EQ(keys->Authenticate(Bearer(absl::StrCat("Bearer ", kAliceKey))).value(), "alice");
  EXPECT_EQ(keys->Authenticate(Bearer(absl::StrCat("bearer ", kBobKey))).value(), "bob");
  EXPECT_EQ(keys->Authenticate(Bearer("Bearer bob-rotated-key-000000")).value(), "bob");
}

TEST(ApiKeysTest, MalformedFilesNameTheLineAndNeverTheKey) {
  struct Case {
    std::string text;
    std::string want;  // in the message, after "keys.txt:"
  };
  const std::string secret = "s3cret-s3cret-s3cret";
  const Case cases[] = {
      {"# only a comment\n" + secret + "\n", "2: expected KEY TENANT"},
      {"short t\n", "1: the key is 5 characters; keys need at least 16"},
      {"\n\n" + secret + "! t\n", "3: the key has a character outside"},
      {secret + " bad/tenant\n", "1: tenant 'bad/tenant'"},
      {secret + " t max_sessions=0\n", "1: 'max_sessions=0': must be at least 1"},
      {secret + " t max_sessions=x\n", "1: 'max_sessions=x'"},
      {secret + " t max_state_bytes=lots\n", "1: 'max_state_bytes=lots'"},
      {secret + " t quota=3\n", "1: unknown field 'quota=3'"},
      {secret + " t\n" + secret + " u\n", "2: the same key as line 1"},
      {secret + " t max_sessions=2\nanother-key-0000000 t max_sessions=3\n",
       "2: tenant 't' has other limits on line 1"},
      {"# nothing\n\n", "no keys"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    auto keys = ApiKeys::Parse(c.text, "keys.txt");
    ASSERT_FALSE(keys.ok());
    EXPECT_EQ(keys.status().code(), absl::StatusCode::kInvalidArgument);
    const std::string message(keys.status().message());
    EXPECT_NE(message.find("keys.txt:"), std::string::npos) << message;
    EXPECT_NE(message.find(c.want), std::string::npos) << message;
    EXPECT_EQ(message.find("s3cret"), std::string::npos) << message;
  }
  EXPECT_EQ(ApiKeys::Load("/nonexistent/keys.txt").status().code(), absl::StatusCode::kNotFound);
}

TEST(ApiKeysTest, MissingWrongAndUnknownCredentialsAreUnauthenticatedWithoutEchoingThem) {
  auto keys = ApiKeys::Parse(absl::StrCat(kAliceKey, " alice\n"), "keys.txt").value();
  const std::string wrong = "wrong-key-that-must-not-be-echoed";
  struct Case {
    Metadata metadata;
    std::string want;
  };
  const Case cases[] = {
      {Metadata{}, "authorization: missing"},
      {Bearer(wrong), "not a Bearer credential"},
      {Bearer("Basic " + wrong), "not a Bearer credential"},
      {Bearer("Bearer "), "not a Bearer credential"},
      {Bearer("Bearer " + wrong), "unknown API key"},
      {Bearer(absl::StrCat("Bearer ", kAliceKey, "x")), "unknown API key"},
      {Bearer(absl::StrCat("Bearer ", std::string(kAliceKey).substr(1))), "unknown API key"},
  };
  for (const Case& c : cases) {
    auto tenant = keys.Authenticate(c.metadata);
    ASSERT_FALSE(tenant.ok()) << c.want;
    EXPECT_EQ(tenant.status().code(), absl::StatusCode::kUnauthenticated);
    const std::string message(tenant.status().message());
    EXPECT_NE(message.find(c.want), std::string::npos) << message;
    EXPECT_NE(message.find("Bearer <API key>"), std::string::npos) << message;
    EXPECT_EQ(message.find("wrong-key"), std::string::npos) << message;
    EXPECT_EQ(message.find(kAliceKey), std::string::npos) << message;
  }
}

TEST(ApiKeysTest, WithoutKeysEveryCallerIsTheDefaultTenant) {
  ApiKeys none;
  EXPECT_FALSE(none.enabled());
  EXPECT_EQ(none.Authenticate(Metadata{}).value(), attnserve::kDefaultTenant);
  EXPECT_EQ(none.Authenticate(Bearer("Bearer anything-at-all-0000")).value(),
            attnserve::kDefaultTenant);
  EXPECT_TRUE(none.limits().empty());
}

}  // namespace
}  // namespace attnserve::service
