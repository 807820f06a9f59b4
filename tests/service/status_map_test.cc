#include "server/service/status_map.h"

#include <gtest/gtest.h>

namespace attnserve::service {
namespace {

TEST(ToGrpcStatus, KeepsCodeAndMessage) {
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
  const struct {
    absl::Status in;
    grpc::StatusCode code;
  } cases[] = {
      {absl::InvalidArgumentError("sampling.top_p"), grpc::StatusCode::INVALID_ARGUMENT},
      {absl::NotFoundError("model"), grpc::StatusCode::NOT_FOUND},
      {absl::FailedPreconditionError("busy"), grpc::StatusCode::FAILED_PRECONDITION},
      {absl::ResourceExhaustedError("memory budget"), grpc::StatusCode::RESOURCE_EXHAUSTED},
      {absl::UnavailableError("shutting down"), grpc::StatusCode::UNAVAILABLE},
      {absl::OutOfRangeError("context"), grpc::StatusCode::OUT_OF_RANGE},
      {absl::DataLossError("weights"), grpc::StatusCode::DATA_LOSS},
      {absl::InternalError("torch"), grpc::StatusCode::INTERNAL},
      {absl::CancelledError("client"), grpc::StatusCode::CANCELLED},
      {absl::DeadlineExceededError("late"), grpc::StatusCode::DEADLINE_EXCEEDED},
  };
  for (const auto& c : cases) {
    grpc::Status s = ToGrpcStatus(c.in);
    EXPECT_EQ(s.error_code(), c.code) << c.in;
    EXPECT_EQ(s.error_message(), std::string(c.in.message()));
  }
}

TEST(GrpcCodeName, SpellsCodesAsGrpcDoes) {
  EXPECT_EQ(GrpcCodeName(grpc::StatusCode::OK), "OK");
  EXPECT_EQ(GrpcCodeName(grpc::StatusCode::INVALID_ARGUMENT), "INVALID_ARGUMENT");
  EXPECT_EQ(GrpcCodeName(grpc::StatusCode::RESOURCE_EXHAUSTED), "RESOURCE_EXHAUSTED");
  EXPECT_EQ(GrpcCodeName(grpc::StatusCode::UNAUTHENTICATED), "UNAUTHENTICATED");
  // A value no code has, inside the enum's range (its enumerators -1..16 make it -32..31):
  // 99 would be undefined behaviour, which clang's UBSan (-fsanitize=enum) reports.
  EXPECT_EQ(GrpcCodeName(static_cast<grpc::StatusCode>(17)), "UNKNOWN");
}

}  // namespace
}  // namespace attnserve::service
