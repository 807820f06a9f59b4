// The HTTP front's own sessions (server/http/own_session.h) over a SessionStore whose
// durable store fails: closing one frees its memory and charge whatever the store says,
// and the stored copy is deleted once the store answers again.
#include "server/http/own_session.h"

#include <gtest/gtest.h>

#include "server/common/clock.h"
#include "server/session/session_store.h"
#include "tests/session/hooked_store.h"
#include "tests/testing/tiny_model.h"

namespace attnserve::http {
namespace {

using session::SessionStore;
using session::testing::HookedStore;

class OwnSessionTest : public testing::Test {
 protected:
  OwnSessionTest()
      : catalogue_(std::vector<std::shared_ptr<const catalogue::ServedModel>>{taylor_}) {
    auto hooked = std::make_unique<HookedStore>();
    hooked_ = hooked.get();
    SessionStore::Options o;
    o.clock = &clock_;
    o.catalogue = &catalogue_;
    o.durable = std::move(hooked);
    store_ = SessionStore::Create(std::move(o)).value();
  }

  std::string NewSession() {
    auto s = store_->Create("alice", taylor_, absl::Minutes(10));
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? (*s)->id() : "";
  }

  ManualClock clock_;
  std::shared_ptr<const catalogue::ServedModel> taylor_ = test_util::TinyServedModel("taylor");
  catalogue::ModelCatalogue catalogue_;
  HookedStore* hooked_ = nullptr;
  std::unique_ptr<SessionStore> store_;
};

TEST_F(OwnSessionTest, CloseFreesTheSessionWhenTheStoreFailsAndRetriesTheDelete) {
  const std::string id = NewSession();
  ASSERT_TRUE(hooked_->has(id));
  hooked_->set_delete_fails(true);
  OwnSession(store_.get(), "alice", id).Close();
  EXPECT_EQ(store_->size(), 0);
  EXPECT_EQ(store_->charged_bytes(), 0);
  EXPECT_EQ(store_->usage("alice").sessions, 0);
  EXPECT_TRUE(hooked_->has(id));  // the store is still down
  store_->ExpireIdle();           // housekeeping retries; still down
  EXPECT_TRUE(hooked_->has(id));
  hooked_->set_delete_fails(false);
  store_->ExpireIdle();
  EXPECT_FALSE(hooked_->has(id));
  // Nothing is left to retry, and the id names nothing.
  EXPECT_TRUE(absl::IsNotFound(store_->Get("alice", id).status()));
}

TEST_F(OwnSessionTest, CloseOnAHealthyStoreDeletesAtOnce) {
  const std::string id = NewSession();
  OwnSession(store_.get(), "alice", id).Close();
  EXPECT_EQ(store_->size(), 0);
  EXPECT_FALSE(hooked_->has(id));
}

}  // namespace
}  // namespace attnserve::http
