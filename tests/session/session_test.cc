#include "server/session/session.h"

#include "server/session/session_store.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <gtest/gtest.h>

#include <atomic>

#include "tests/testing/tiny_model.h"

namespace attnserve::session {
namespace {

// LibTorch's CPU allocator, failing while armed: memory pressure on demand.
class FailingAllocator : public c10::Allocator {
 public:
  explicit FailingAllocator(c10::Allocator* real) : real_(real) {}
  c10::DataPtr allocate(size_t n) const override {
    TORCH_CHECK(!armed.load(), "DefaultCPUAllocator: not enough memory (test)");
    return real_->allocate(n);
  }
  c10::DeleterFnPtr raw_deleter() const override { return real_->raw_deleter(); }
  std::atomic<bool> armed{false};

 private:
  c10::Allocator* const real_;
};

// Restoring a verified snapshot that cannot allocate its tensors is a status for that
// turn, not an abort of the server.
TEST(SessionTest, MaterializeReportsAnAllocationFailure) {
  auto model = test_util::TinyServedModel("taylor");
  catalogue::ModelCatalogue catalogue({model});
  Session original("a", "alice", model, absl::Now(), absl::Minutes(1));
  std::vector<int32_t> tokens(7, 66);
  ASSERT_TRUE(model->model->Prefill(original.state(), tokens).ok());
  auto bytes = original.Snapshot();
  ASSERT_TRUE(bytes.ok());
  SessionStore::Options o;
  o.catalogue = &catalogue;
  SessionStore store(std::move(o));
  auto restored = store.Import(kDefaultTenant, *bytes, absl::ZeroDuration());
  ASSERT_TRUE(restored.ok()) << restored.status();  // verified; tensors not made yet

  c10::Allocator* real = c10::GetCPUAllocator();
  static FailingAllocator failing(real);
  c10::SetCPUAllocator(&failing, /*priority=*/100);
  failing.armed = true;
  absl::Status made = (*restored)->Materialize();
  failing.armed = false;
  c10::SetCPUAllocator(real, /*priority=*/101);
  EXPECT_EQ(made.code(), absl::StatusCode::kResourceExhausted) << made;
  EXPECT_NE(made.message().find("not enough memory"), std::string::npos) << made;
  // The session is unchanged: a later turn, with memory back, restores it.
  EXPECT_TRUE((*restored)->Materialize().ok());
  EXPECT_EQ((*restored)->state().position(), 7);
}

}  // namespace
}  // namespace attnserve::session
