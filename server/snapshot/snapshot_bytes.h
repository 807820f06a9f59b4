// A session snapshot's bytes as a view into a shared string (snapshot.h reads them).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

namespace attnserve::snapshot {

// A snapshot's bytes, shared rather than copied: all of `owner`, or its tail from
// `offset` on (a stored record that carries a snapshot after its own header: a kept
// chat state, a stored response). A state of tens of MiB copied on every turn costs
// more in fresh pages than in bytes moved.
class SnapshotBytes {
 public:
  SnapshotBytes() = default;
  SnapshotBytes(std::shared_ptr<const std::string> whole)  // NOLINT: implicit on purpose
      : owner_(std::move(whole)) {}
  // `offset` is at most owner->size().
  SnapshotBytes(std::shared_ptr<const std::string> owner, size_t offset)
      : owner_(std::move(owner)), offset_(offset) {}

  explicit operator bool() const { return owner_ != nullptr; }
  std::string_view view() const {
    return owner_ ? std::string_view(*owner_).substr(offset_) : std::string_view();
  }
  size_t size() const { return owner_ ? owner_->size() - offset_ : 0; }
  // The snapshot as a string of its own: `owner` itself when it is all of it, else a
  // copy of the tail.
  std::shared_ptr<const std::string> Whole() const {
    if (!owner_ || offset_ == 0) return owner_;
    return std::make_shared<const std::string>(view());
  }

 private:
  std::shared_ptr<const std::string> owner_;
  size_t offset_ = 0;
};

}  // namespace attnserve::snapshot
