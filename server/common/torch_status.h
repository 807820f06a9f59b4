// Turns LibTorch exceptions into absl::Status. This is the one place in attnserve that
// catches c10::Error: LibTorch throws, the rest of the code base returns statuses.
#pragma once

#include <c10/util/Exception.h>

#include <exception>
#include <string>
#include <type_traits>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace attnserve {

namespace internal {
template <typename R>
struct AsStatusOr {
  using type = absl::StatusOr<R>;
};
template <typename T>
struct AsStatusOr<absl::StatusOr<T>> {
  using type = absl::StatusOr<T>;
};
template <>
struct AsStatusOr<absl::Status> {
  using type = absl::Status;
};
}  // namespace internal

// Runs `fn` and returns its result; a c10::Error (or std::exception) becomes an
// INTERNAL status whose message starts with `what`. `fn` returns T or absl::StatusOr<T>.
template <typename Fn>
auto CatchTorch(const char* what, Fn&& fn) {
  using Out = typename internal::AsStatusOr<std::invoke_result_t<Fn>>::type;
  try {
    return Out(std::forward<Fn>(fn)());
  } catch (const c10::Error& e) {
    return Out(absl::InternalError(std::string(what) + ": " + e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return Out(absl::InternalError(std::string(what) + ": " + e.what()));
  }
}

}  // namespace attnserve
