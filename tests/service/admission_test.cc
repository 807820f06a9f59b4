// ParseGenerate's checks, without a server. Requests name a session, so the (empty)
// catalogue is never consulted.
#include "server/service/admission.h"

#include <gtest/gtest.h>

namespace attnserve::service {
namespace {

absl::StatusOr<ParsedGenerate> Parse(const v1::GenerateRequest& request) {
  static const catalogue::ModelCatalogue* const models = new catalogue::ModelCatalogue({});
  return ParseGenerate(request, *models, RequestLimits{});
}

v1::GenerateRequest Request(bool logprobs, int top_logprobs) {
  v1::GenerateRequest r;
  r.set_session_id("s");
  r.set_text("hello");
  r.set_logprobs(logprobs);
  r.set_top_logprobs(top_logprobs);
  return r;
}

TEST(ParseGenerate, TopLogprobsFromZeroToTwentyWithLogprobs) {
  for (int n : {0, 1, 20}) {
    auto parsed = Parse(Request(true, n));
    ASSERT_TRUE(parsed.ok()) << n << ": " << parsed.status();
    EXPECT_TRUE(parsed->turn.logprobs);
    EXPECT_EQ(parsed->turn.top_logprobs, n);
  }
  auto plain = Parse(Request(false, 0));
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_FALSE(plain->turn.logprobs);
  EXPECT_EQ(plain->turn.top_logprobs, 0);
}

TEST(ParseGenerate, TopLogprobsOutOfRangeOrWithoutLogprobsIsInvalidNamingTheField) {
  struct Case {
    bool logprobs;
    int top_logprobs;
    std::string message;
  };
  for (const Case& c : {Case{true, 21, "top_logprobs must be in [0, 20], got 21"},
                        Case{true, -1, "top_logprobs must be in [0, 20], got -1"},
                        Case{false, 3, "top_logprobs: 3 alternatives need logprobs"}}) {
    auto parsed = Parse(Request(c.logprobs, c.top_logprobs));
    ASSERT_FALSE(parsed.ok()) << c.top_logprobs;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(parsed.status().message().find(c.message), std::string::npos)
        << parsed.status();
  }
}

}  // namespace
}  // namespace attnserve::service
