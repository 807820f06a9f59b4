#include "client/bench.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

namespace attnserve::client {
namespace {

using ::testing::HasSubstr;

TEST(SummarizeBenchTest, MergesThreadsAndComputesRate) {
  BenchOptions options;
  options.sessions = 2;
  options.turns = 2;
  std::vector<BenchSamples> samples(2);
  samples[0].generated_tokens = 30;
  samples[0].ttft_ms = {10, 30};
  samples[0].itl_ms = {1, 2, 3};
  samples[1].generated_tokens = 10;
  samples[1].errors = 1;
  samples[1].first_error = "attnserve: UNAVAILABLE: gone";
  samples[1].ttft_ms = {20};
  samples[0].retries = 2;
  samples[1].retries = 5;
  samples[1].continuations = 1;
  const BenchReport report = SummarizeBench(options, samples, 2.0);
  EXPECT_EQ(report.generated_tokens, 40);
  EXPECT_DOUBLE_EQ(report.tokens_per_second, 20);
  EXPECT_EQ(report.errors, 1);
  EXPECT_EQ(report.retries, 7);
  EXPECT_EQ(report.continuations, 1);
  EXPECT_EQ(report.first_error, "attnserve: UNAVAILABLE: gone");
  EXPECT_EQ(report.ttft_ms.count, 3u);
  EXPECT_EQ(report.ttft_ms.p50, 20);
  EXPECT_EQ(report.ttft_ms.p99, 30);
  EXPECT_EQ(report.ttft_ms.max, 30);
  EXPECT_EQ(report.itl_ms.p50, 2);
}

TEST(FormatBenchTest, JsonIsOneLineWithNullForMissingPercentiles) {
  BenchOptions options;
  options.model = "a\"b";
  const BenchReport report = SummarizeBench(options, {BenchSamples()}, 0.5);
  EXPECT_EQ(
      FormatBenchJson(report),
      "{\"sessions\":4,\"turns\":4,\"max_tokens\":64,\"temperature\":0.000,"
      "\"model\":\"a\\\"b\",\"generated_tokens\":0,\"wall_s\":0.500,"
      "\"tokens_per_s\":0.000,\"ttft_ms\":{\"p50\":null,\"p95\":null,\"p99\":"
      "null,\"max\":null,"
      "\"count\":0},\"itl_ms\":{\"p50\":null,\"p95\":null,\"p99\":null,\"max\":null,"
      "\"count\":0},"
      "\"errors\":0,\"retries\":0,\"continuations\":0}");
}

TEST(FormatBenchTest, TextHasOneLabelledLinePerFigure) {
  BenchSamples s;
  s.generated_tokens = 100;
  s.ttft_ms = {12.5};
  s.itl_ms = {2, 4};
  s.retries = 3;
  s.continuations = 1;
  const std::string text =
      FormatBenchText(SummarizeBench(BenchOptions(), {s}, 4.0));
  EXPECT_THAT(text, HasSubstr("generated tokens   100\n"));
  EXPECT_THAT(text, HasSubstr("wall time          4.000 s\n"));
  EXPECT_THAT(text, HasSubstr("throughput         25.0 tokens/s\n"));
  EXPECT_THAT(text, HasSubstr("TTFT               p50 12.50 ms  p95 12.50 ms  "
                              "p99 12.50 ms  (1 turns)\n"));
  EXPECT_THAT(text, HasSubstr("inter-token        p50 2.00 ms  p95 4.00 ms  "
                              "p99 4.00 ms  (2 gaps)\n"));
  EXPECT_THAT(text, HasSubstr("errors             0\n"));
  EXPECT_THAT(text, HasSubstr("retries            3 (1 turns continued after "
                              "a shutdown)\n"));
}

}  // namespace
}  // namespace attnserve::client
