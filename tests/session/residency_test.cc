#include "server/session/residency.h"

#include <gtest/gtest.h>

namespace attnserve::session {
namespace {

Residency::Limits Limits() {
  Residency::Limits l;
  l.max_sessions = 3;
  l.budget_bytes = 1000;
  l.tenants["alice"] = TenantLimits{2, 500};
  return l;
}

TEST(ResidencyTest, AdmitIsIdempotent) {
  Residency r(Limits());
  ASSERT_TRUE(r.Admit("a", "alice", 100, "m").ok());
  ASSERT_TRUE(r.Admit("a", "alice", 100, "m").ok());  // a second load of the same session
  EXPECT_EQ(r.total().sessions, 1);
  EXPECT_EQ(r.total().bytes, 100);
  EXPECT_EQ(r.usage("alice").sessions, 1);
}

TEST(ResidencyTest, ReleaseIsIdempotent) {
  Residency r(Limits());
  ASSERT_TRUE(r.Admit("a", "alice", 100, "m").ok());
  ASSERT_TRUE(r.Admit("b", "alice", 50, "m").ok());
  EXPECT_TRUE(r.Release("a"));
  EXPECT_FALSE(r.Release("a"));  // a close racing a spill
  EXPECT_EQ(r.usage("alice").sessions, 1);
  EXPECT_EQ(r.usage("alice").bytes, 50);
  EXPECT_EQ(r.total().bytes, 50);
  EXPECT_EQ(r.Resize("a", 400).code(), absl::StatusCode::kOk);  // released: not charged
  EXPECT_EQ(r.total().bytes, 50);
}

TEST(ResidencyTest, TenantLimitsComeBeforeTheServers) {
  Residency r(Limits());
  ASSERT_TRUE(r.Admit("a", "alice", 100, "m").ok());
  ASSERT_TRUE(r.Admit("b", "alice", 100, "m").ok());
  Residency::Refusal refusal;
  absl::Status s = r.CheckAdmit("alice", 1, "m", &refusal);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(refusal, Residency::Refusal::kTenant);
  EXPECT_NE(s.message().find("max_sessions: tenant 'alice'"), std::string::npos) << s;
  ASSERT_TRUE(r.Admit("c", "bob", 100, "m").ok());
  s = r.CheckAdmit("bob", 1, "m", &refusal);
  EXPECT_EQ(refusal, Residency::Refusal::kServer);
  EXPECT_NE(s.message().find("max_sessions: the server"), std::string::npos) << s;
}

TEST(ResidencyTest, ResizeChecksTheBudgetAndTheTenantsBytes) {
  Residency r(Limits());
  ASSERT_TRUE(r.Admit("a", "alice", 100, "m").ok());
  absl::Status s = r.Resize("a", 600);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("max_state_bytes"), std::string::npos) << s;
  EXPECT_EQ(r.charged("a"), 100);  // unchanged
  ASSERT_TRUE(r.Admit("b", "bob", 800, "m").ok());
  s = r.Resize("a", 300);
  EXPECT_NE(s.message().find("memory budget"), std::string::npos) << s;
  EXPECT_TRUE(r.Resize("a", 50).ok());  // shrinking always fits
  EXPECT_EQ(r.total().bytes, 850);
}

}  // namespace
}  // namespace attnserve::session
