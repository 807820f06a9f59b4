#include "client/retry.h"

#include <cmath>
#include <random>

namespace attnserve::client {
namespace {

// A uniform factor in [1 - jitter, 1 + jitter]. One generator per thread:
// bench retries from many threads.
double JitterFactor(double jitter) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return std::uniform_real_distribution<double>(1 - jitter, 1 + jitter)(rng);
}

}  // namespace

void AddSessionHeader(grpc::ClientContext* context,
                      const std::string& session_id) {
  if (!session_id.empty()) context->AddMetadata(kSessionIdHeader, session_id);
}

RetryLoop::RetryLoop(const GlobalOptions& options, double default_seconds,
                     const RetryClock& clock, RetryPolicy policy)
    : policy_(policy), clock_(clock), start_(clock.now()) {
  const double seconds =
      options.timeout_seconds > 0 ? options.timeout_seconds : default_seconds;
  deadline_ = start_ + absl::Seconds(seconds);
}

void RetryLoop::Prepare(grpc::ClientContext* context,
                        const std::string& session_id) const {
  context->set_deadline(absl::ToChronoTime(deadline_));
  AddSessionHeader(context, session_id);
}

bool RetryLoop::Retry(const grpc::Status& status) {
  // A continuation sent right after a shutdown stop usually reaches the stopped
  // replica as its gRPC server shuts down, which cancels it (retry.h).
  const grpc::StatusCode code = status.error_code();
  if ((code != grpc::StatusCode::UNAVAILABLE &&
       code != grpc::StatusCode::CANCELLED) ||
      attempts_ >= policy_.max_attempts) {
    return false;
  }
  const absl::Duration wait = policy_.initial_backoff *
                              std::ldexp(1.0, attempts_ - 1) *
                              JitterFactor(policy_.jitter);
  const absl::Time resume = clock_.now() + wait;
  // A retry that could not start before the deadline would only turn the
  // server's answer into DEADLINE_EXCEEDED.
  if (resume > start_ + policy_.budget || resume >= deadline_) return false;
  clock_.sleep(wait);
  ++attempts_;
  return true;
}

}  // namespace attnserve::client
