#include "server/metrics/metrics.h"

#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"

namespace attnserve::metrics {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

std::unique_ptr<Metrics> MakeMetrics(
    const std::string& address = "127.0.0.1:0") {
  auto metrics = Metrics::Create(address);
  EXPECT_TRUE(metrics.ok()) << metrics.status();
  return metrics.ok() ? std::move(metrics).value() : nullptr;
}

// An IPv4 loopback TCP socket; closed on destruction.
class Socket {
 public:
  Socket() : fd_(socket(AF_INET, SOCK_STREAM, 0)) {}
  ~Socket() {
    if (fd_ >= 0) close(fd_);
  }
  int fd() const { return fd_; }

 private:
  int fd_;
};

sockaddr_in Loopback(int port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return addr;
}

// GETs `path` from 127.0.0.1:port with plain POSIX sockets and returns the
// whole response (status line, headers and body), or "" on a socket error.
std::string HttpGet(int port, const std::string& path) {
  Socket s;
  if (s.fd() < 0) return "";
  // A broken server fails the test instead of hanging it.
  timeval timeout{/*tv_sec=*/10, /*tv_usec=*/0};
  setsockopt(s.fd(), SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  sockaddr_in addr = Loopback(port);
  if (connect(s.fd(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0)
    return "";
  const std::string request = absl::StrCat(
      "GET ", path, " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  for (size_t sent = 0; sent < request.size();) {
    const ssize_t n =
        send(s.fd(), request.data() + sent, request.size() - sent, 0);
    if (n <= 0) return "";
    sent += static_cast<size_t>(n);
  }
  std::string response;
  char buffer[4096];
  for (;;) {
    const ssize_t n = recv(s.fd(), buffer, sizeof(buffer), 0);
    if (n < 0) return "";
    if (n == 0) break;
    response.append(buffer, static_cast<size_t>(n));
  }
  return response;
}

TEST(Metrics, CreateOnPortZeroBindsAFreePort) {
  auto metrics = MakeMetrics();
  ASSERT_NE(metrics, nullptr);
  EXPECT_GT(metrics->port(), 0);
  EXPECT_LT(metrics->port(), 65536);
}

TEST(Metrics, EmptyAddressRecordsWithoutServing) {
  auto metrics = MakeMetrics("");
  ASSERT_NE(metrics, nullptr);
  EXPECT_EQ(metrics->port(), 0);
  metrics->ForModel("m", "kv").AddPromptTokens(7);
  EXPECT_THAT(
      metrics->Serialize(),
      HasSubstr(
          "attnserve_prompt_tokens_total{attention=\"kv\",model=\"m\"} 7\n"));
}

TEST(Metrics, ScrapeOverHttpReturnsRecordedValues) {
  auto metrics = MakeMetrics();
  ASSERT_NE(metrics, nullptr);
  ModelMetrics& m = metrics->ForModel("m", "taylor");
  m.AddGeneratedTokens(40);
  m.AddGeneratedTokens(2);
  m.AddPromptTokens(13);
  m.ObserveInterTokenLatency(absl::Microseconds(1500));
  m.ObserveInterTokenLatency(absl::Milliseconds(30));
  m.ObserveBatchSize(3);
  m.SetActiveSessions(5);
  metrics->RecordRequest("Generate", "OK", "m", "taylor");
  metrics->RecordRequest("Generate", "OK", "m", "taylor");
  metrics->RecordRequest("Generate", "INVALID_ARGUMENT", "", "");

  const std::string response = HttpGet(metrics->port(), "/metrics");
  EXPECT_THAT(response, StartsWith("HTTP/1.1 200 OK\r\n"));
  EXPECT_THAT(response, HasSubstr("\nattnserve_generated_tokens_total"
                                  "{attention=\"taylor\",model=\"m\"} 42\n"));
  EXPECT_THAT(response, HasSubstr("\nattnserve_prompt_tokens_total"
                                  "{attention=\"taylor\",model=\"m\"} 13\n"));
  EXPECT_THAT(response,
              HasSubstr("\nattnserve_inter_token_latency_seconds_count"
                        "{attention=\"taylor\",model=\"m\"} 2\n"));
  EXPECT_THAT(response,
              HasSubstr("\nattnserve_inter_token_latency_seconds_bucket"
                        "{attention=\"taylor\",model=\"m\",le=\"0.001\"} 0\n"));
  EXPECT_THAT(response,
              HasSubstr("\nattnserve_inter_token_latency_seconds_bucket"
                        "{attention=\"taylor\",model=\"m\",le=\"0.002\"} 1\n"));
  EXPECT_THAT(response,
              HasSubstr("\nattnserve_inter_token_latency_seconds_bucket"
                        "{attention=\"taylor\",model=\"m\",le=\"0.05\"} 2\n"));
  EXPECT_THAT(response,
              HasSubstr("\nattnserve_batch_size_bucket"
                        "{attention=\"taylor\",model=\"m\",le=\"2\"} 0\n"));
  EXPECT_THAT(response,
              HasSubstr("\nattnserve_batch_size_bucket"
                        "{attention=\"taylor\",model=\"m\",le=\"4\"} 1\n"));
  EXPECT_THAT(response, HasSubstr("\nattnserve_active_sessions"
                                  "{attention=\"taylor\",model=\"m\"} 5\n"));
  EXPECT_THAT(response,
              HasSubstr("\nattnserve_requests_total{attention=\"taylor\","
                        "code=\"OK\",method=\"Generate\",model=\"m\"} 2\n"));
  EXPECT_THAT(response,
              HasSubstr("\nattnserve_requests_total{attention=\"\","
                        "code=\"INVALID_ARGUMENT\",method=\"Generate\","
                        "model=\"\"} 1\n"));
}

TEST(Metrics, SerializeMatchesTheScrapedFamilies) {
  auto metrics = MakeMetrics();
  ASSERT_NE(metrics, nullptr);
  metrics->ForModel("m", "kv").SetWaitingTurns(4);
  const std::string serialized = metrics->Serialize();
  const std::string scraped = HttpGet(metrics->port(), "/metrics");
  // The scrape also carries the exposer's own exposer_* families.
  EXPECT_THAT(scraped, HasSubstr(serialized));
  EXPECT_THAT(
      serialized,
      HasSubstr("attnserve_waiting_turns{attention=\"kv\",model=\"m\"} 4\n"));
}

TEST(Metrics, EveryFamilyHasHelpTypeAndModelLabels) {
  auto metrics = MakeMetrics("");
  ASSERT_NE(metrics, nullptr);
  metrics->ForModel("m", "kv");
  metrics->RecordRequest("Generate", "OK", "m", "kv");
  const std::string text = metrics->Serialize();
  const std::vector<std::pair<std::string, std::string>> families = {
      {"attnserve_requests_total", "counter"},
      {"attnserve_prompt_tokens_total", "counter"},
      {"attnserve_generated_tokens_total", "counter"},
      {"attnserve_time_to_first_token_seconds", "histogram"},
      {"attnserve_inter_token_latency_seconds", "histogram"},
      {"attnserve_constraint_mask_seconds", "histogram"},
      {"attnserve_request_duration_seconds", "histogram"},
      {"attnserve_batch_size", "histogram"},
      {"attnserve_running_turns", "gauge"},
      {"attnserve_waiting_turns", "gauge"},
      {"attnserve_active_sessions", "gauge"},
      {"attnserve_session_state_bytes", "gauge"},
  };
  for (const auto& [name, type] : families) {
    EXPECT_THAT(text, HasSubstr(absl::StrCat("# HELP ", name, " "))) << name;
    EXPECT_THAT(text,
                HasSubstr(absl::StrCat("# TYPE ", name, " ", type, "\n")));
    const std::string sample =
        type == "histogram" ? absl::StrCat(name, "_count") : name;
    EXPECT_THAT(text,
                HasSubstr(absl::StrCat("\n", sample, "{attention=\"kv\"")))
        << name;
  }
}

TEST(Metrics, HistogramBucketsResolveMilliseconds) {
  auto metrics = MakeMetrics("");
  ASSERT_NE(metrics, nullptr);
  ModelMetrics& m = metrics->ForModel("m", "kv");
  m.ObserveTimeToFirstToken(absl::Microseconds(1500));
  m.ObserveRequestDuration(absl::Milliseconds(7));
  m.ObserveRequestDuration(absl::Seconds(90));
  const std::string text = metrics->Serialize();
  EXPECT_THAT(text,
              HasSubstr("attnserve_time_to_first_token_seconds_bucket"
                        "{attention=\"kv\",model=\"m\",le=\"0.001\"} 0\n"));
  EXPECT_THAT(text,
              HasSubstr("attnserve_time_to_first_token_seconds_bucket"
                        "{attention=\"kv\",model=\"m\",le=\"0.002\"} 1\n"));
  EXPECT_THAT(text,
              HasSubstr("attnserve_request_duration_seconds_bucket"
                        "{attention=\"kv\",model=\"m\",le=\"0.005\"} 0\n"));
  EXPECT_THAT(text,
              HasSubstr("attnserve_request_duration_seconds_bucket"
                        "{attention=\"kv\",model=\"m\",le=\"0.01\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("attnserve_request_duration_seconds_bucket"
                              "{attention=\"kv\",model=\"m\",le=\"60\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("attnserve_request_duration_seconds_bucket"
                              "{attention=\"kv\",model=\"m\",le=\"120\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("attnserve_request_duration_seconds_count"
                              "{attention=\"kv\",model=\"m\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("attnserve_time_to_first_token_seconds_sum"
                              "{attention=\"kv\",model=\"m\"} 0.0015\n"));
}

TEST(Metrics, GaugesHoldTheLastValueSet) {
  auto metrics = MakeMetrics("");
  ASSERT_NE(metrics, nullptr);
  ModelMetrics& m = metrics->ForModel("m", "kv");
  m.SetRunningTurns(8);
  m.SetRunningTurns(3);
  m.SetSessionStateBytes(int64_t{3} << 32);
  m.SetSessionStateBytes(int64_t{5} << 32);  // 21474836480: exact as a double
  const std::string text = metrics->Serialize();
  EXPECT_THAT(
      text,
      HasSubstr("attnserve_running_turns{attention=\"kv\",model=\"m\"} 3\n"));
  EXPECT_THAT(text, HasSubstr("attnserve_session_state_bytes"
                              "{attention=\"kv\",model=\"m\"} 21474836480\n"));
}

TEST(Metrics, TenantGaugesHoldWhatEachTenantHoldsNow) {
  auto metrics = MakeMetrics("");
  ASSERT_NE(metrics, nullptr);
  metrics->SetTenantUsage("alice", 0, 0);
  metrics->SetTenantUsage("bob", 4, 1000);
  metrics->SetTenantUsage("bob", 2, 500);
  const std::string text = metrics->Serialize();
  EXPECT_THAT(text, HasSubstr("attnserve_tenant_sessions{tenant=\"alice\"} 0\n"));
  EXPECT_THAT(text, HasSubstr("attnserve_tenant_sessions{tenant=\"bob\"} 2\n"));
  EXPECT_THAT(text,
              HasSubstr("attnserve_tenant_session_state_bytes{tenant=\"bob\"} 500\n"));
}

TEST(Metrics, ForModelReturnsOneChildSetPerLabelPair) {
  auto metrics = MakeMetrics("");
  ASSERT_NE(metrics, nullptr);
  ModelMetrics& a = metrics->ForModel("m", "taylor");
  EXPECT_EQ(&metrics->ForModel("m", "taylor"), &a);
  EXPECT_NE(&metrics->ForModel("m", "kv"), &a);
  EXPECT_NE(&metrics->ForModel("n", "taylor"), &a);
  // Pairs are not confused by concatenation.
  EXPECT_NE(&metrics->ForModel("ab", "c"), &metrics->ForModel("a", "bc"));

  a.AddGeneratedTokens(5);
  metrics->ForModel("m", "taylor").AddGeneratedTokens(1);
  const std::string text = metrics->Serialize();
  EXPECT_THAT(text, HasSubstr("attnserve_generated_tokens_total"
                              "{attention=\"taylor\",model=\"m\"} 6\n"));
  EXPECT_THAT(text, HasSubstr("attnserve_generated_tokens_total"
                              "{attention=\"kv\",model=\"m\"} 0\n"));
  EXPECT_THAT(text, Not(HasSubstr("attnserve_generated_tokens_total"
                                  "{attention=\"kv\",model=\"m\"} 6\n")));
}

TEST(Metrics, ConcurrentRecordingLosesNoIncrements) {
  auto metrics = MakeMetrics("");
  ASSERT_NE(metrics, nullptr);
  constexpr int kThreads = 8;
  constexpr int kIterations = 1000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&metrics] {
      for (int i = 0; i < kIterations; ++i) {
        metrics->ForModel("m", "taylor").AddPromptTokens(1);
        metrics->RecordRequest("Generate", "OK", "m", "taylor");
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  const std::string text = metrics->Serialize();
  EXPECT_THAT(text, HasSubstr("attnserve_prompt_tokens_total"
                              "{attention=\"taylor\",model=\"m\"} 8000\n"));
  EXPECT_THAT(text,
              HasSubstr("attnserve_requests_total{attention=\"taylor\","
                        "code=\"OK\",method=\"Generate\",model=\"m\"} 8000\n"));
}

// The text of one store series: `name{op="...",store="..."} value` (labels in
// the order prometheus-cpp writes them, sorted by name), or without op when op
// is empty.
std::string StoreSample(const std::string& name, const std::string& store,
                        const std::string& op, const std::string& value) {
  const std::string labels =
      op.empty() ? absl::StrCat("store=\"", store, "\"")
                 : absl::StrCat("op=\"", op, "\",store=\"", store, "\"");
  return absl::StrCat("\n", name, "{", labels, "} ", value, "\n");
}

// Every series of one store's counters and latency counts, as lines of text.
std::vector<std::string> StoreSeries(const std::string& store,
                                     const std::string& written,
                                     const std::string& read,
                                     const std::string& bytes_written,
                                     const std::string& bytes_read) {
  return {
      StoreSample("attnserve_snapshots_written_total", store, "", written),
      StoreSample("attnserve_snapshots_read_total", store, "", read),
      StoreSample("attnserve_snapshot_bytes_written_total", store, "",
                  bytes_written),
      StoreSample("attnserve_snapshot_bytes_read_total", store, "", bytes_read),
  };
}

TEST(StoreMetrics, ForStoreCreatesEverySeriesAtZero) {
  auto metrics = MakeMetrics("");
  ASSERT_NE(metrics, nullptr);
  metrics->ForStore("dir:/var/lib/x");
  const std::string text = metrics->Serialize();
  const std::vector<std::pair<std::string, std::string>> families = {
      {"attnserve_snapshots_written_total", "counter"},
      {"attnserve_snapshots_read_total", "counter"},
      {"attnserve_snapshot_bytes_written_total", "counter"},
      {"attnserve_snapshot_bytes_read_total", "counter"},
      {"attnserve_store_latency_seconds", "histogram"},
      {"attnserve_store_errors_total", "counter"},
      {"attnserve_sessions_spilled_total", "counter"},
  };
  for (const auto& [name, type] : families) {
    EXPECT_THAT(text, HasSubstr(absl::StrCat("# HELP ", name, " "))) << name;
    EXPECT_THAT(text,
                HasSubstr(absl::StrCat("# TYPE ", name, " ", type, "\n")));
  }
  for (const std::string& line :
       StoreSeries("dir:/var/lib/x", "0", "0", "0", "0"))
    EXPECT_THAT(text, HasSubstr(line));
  EXPECT_THAT(text, HasSubstr(StoreSample("attnserve_sessions_spilled_total",
                                          "dir:/var/lib/x", "", "0")));
  for (const std::string op : {"write", "read", "delete"}) {
    EXPECT_THAT(text, HasSubstr(StoreSample("attnserve_store_errors_total",
                                            "dir:/var/lib/x", op, "0")));
    EXPECT_THAT(text,
                HasSubstr(StoreSample("attnserve_store_latency_seconds_count",
                                      "dir:/var/lib/x", op, "0")));
    EXPECT_THAT(text, HasSubstr(absl::StrCat(
                          "\nattnserve_store_latency_seconds_bucket{op=\"", op,
                          "\",store=\"dir:/var/lib/x\",le=\"5\"} 0\n")));
  }
}

TEST(StoreMetrics, ObserveWriteCountsSuccessesAndErrors) {
  auto metrics = MakeMetrics("");
  ASSERT_NE(metrics, nullptr);
  StoreMetrics& s = metrics->ForStore("dir:/x");
  s.ObserveWrite(absl::Microseconds(700), 1000, /*ok=*/true);
  s.ObserveWrite(absl::Milliseconds(3), 24, /*ok=*/true);
  s.ObserveWrite(absl::Seconds(2), 5000, /*ok=*/false);  // bytes not moved
  const std::string text = metrics->Serialize();
  for (const std::string& line : StoreSeries("dir:/x", "2", "0", "1024", "0"))
    EXPECT_THAT(text, HasSubstr(line));
  EXPECT_THAT(text, HasSubstr(StoreSample("attnserve_store_errors_total",
                                          "dir:/x", "write", "1")));
  EXPECT_THAT(text, HasSubstr(StoreSample("attnserve_store_errors_total",
                                          "dir:/x", "read", "0")));
  EXPECT_THAT(text, HasSubstr(StoreSample("attnserve_store_errors_total",
                                          "dir:/x", "delete", "0")));
  // Failed writes are timed too.
  EXPECT_THAT(text,
              HasSubstr(StoreSample("attnserve_store_latency_seconds_count",
                                    "dir:/x", "write", "3")));
  EXPECT_THAT(text,
              HasSubstr(StoreSample("attnserve_store_latency_seconds_count",
                                    "dir:/x", "read", "0")));
  EXPECT_THAT(text,
              HasSubstr(StoreSample("attnserve_store_latency_seconds_count",
                                    "dir:/x", "delete", "0")));
  EXPECT_THAT(text,
              HasSubstr("\nattnserve_store_latency_seconds_bucket"
                        "{op=\"write\",store=\"dir:/x\",le=\"0.0005\"} 0\n"));
  EXPECT_THAT(text,
              HasSubstr("\nattnserve_store_latency_seconds_bucket"
                        "{op=\"write\",store=\"dir:/x\",le=\"0.001\"} 1\n"));
  EXPECT_THAT(text,
              HasSubstr("\nattnserve_store_latency_seconds_bucket"
                        "{op=\"write\",store=\"dir:/x\",le=\"0.005\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("\nattnserve_store_latency_seconds_bucket"
                              "{op=\"write\",store=\"dir:/x\",le=\"1\"} 2\n"));
  EXPECT_THAT(text,
              HasSubstr("\nattnserve_store_latency_seconds_bucket"
                        "{op=\"write\",store=\"dir:/x\",le=\"2.5\"} 3\n"));
  EXPECT_THAT(text, HasSubstr(StoreSample("attnserve_store_latency_seconds_sum",
                                          "dir:/x", "write", "2.0037")));
}

TEST(StoreMetrics, ObserveReadCountsOnlyReadsThatFoundASnapshot) {
  auto metrics = MakeMetrics("");
  ASSERT_NE(metrics, nullptr);
  StoreMetrics& s = metrics->ForStore("redis://h:6379");
  s.ObserveRead(absl::Microseconds(80), 300, /*ok=*/true, /*found=*/true);
  s.ObserveRead(absl::Microseconds(80), 200, /*ok=*/true, /*found=*/true);
  s.ObserveRead(absl::Microseconds(80), 0, /*ok=*/true, /*found=*/false);
  s.ObserveRead(absl::Milliseconds(40), 0, /*ok=*/false, /*found=*/false);
  const std::string text = metrics->Serialize();
  for (const std::string& line :
       StoreSeries("redis://h:6379", "0", "2", "0", "500"))
    EXPECT_THAT(text, HasSubstr(line));
  EXPECT_THAT(text, HasSubstr(StoreSample("attnserve_store_errors_total",
                                          "redis://h:6379", "read", "1")));
  EXPECT_THAT(text, HasSubstr(StoreSample("attnserve_store_errors_total",
                                          "redis://h:6379", "write", "0")));
  // The miss and the failure are reads all the same.
  EXPECT_THAT(text,
              HasSubstr(StoreSample("attnserve_store_latency_seconds_count",
                                    "redis://h:6379", "read", "4")));
  EXPECT_THAT(text,
              HasSubstr(StoreSample("attnserve_store_latency_seconds_count",
                                    "redis://h:6379", "write", "0")));
  EXPECT_THAT(text,
              HasSubstr("\nattnserve_store_latency_seconds_bucket{op=\"read\","
                        "store=\"redis://h:6379\",le=\"0.0001\"} 3\n"));
  EXPECT_THAT(text,
              HasSubstr("\nattnserve_store_latency_seconds_bucket{op=\"read\","
                        "store=\"redis://h:6379\",le=\"0.025\"} 3\n"));
  EXPECT_THAT(text,
              HasSubstr("\nattnserve_store_latency_seconds_bucket{op=\"read\","
                        "store=\"redis://h:6379\",le=\"0.05\"} 4\n"));
}

TEST(StoreMetrics, ObserveDeleteAndAddSpilled) {
  auto metrics = MakeMetrics("");
  ASSERT_NE(metrics, nullptr);
  StoreMetrics& s = metrics->ForStore("dir:/x");
  s.ObserveDelete(absl::Microseconds(30), /*ok=*/true);
  s.ObserveDelete(absl::Microseconds(30), /*ok=*/false);
  s.ObserveDelete(absl::Microseconds(30), /*ok=*/false);
  s.AddSpilled(3);
  s.AddSpilled(4);
  s.AddSpilled(-2);  // ignored: counters never go down
  const std::string text = metrics->Serialize();
  for (const std::string& line : StoreSeries("dir:/x", "0", "0", "0", "0"))
    EXPECT_THAT(text, HasSubstr(line));
  EXPECT_THAT(text, HasSubstr(StoreSample("attnserve_store_errors_total",
                                          "dir:/x", "delete", "2")));
  EXPECT_THAT(text, HasSubstr(StoreSample("attnserve_store_errors_total",
                                          "dir:/x", "write", "0")));
  EXPECT_THAT(text,
              HasSubstr(StoreSample("attnserve_store_latency_seconds_count",
                                    "dir:/x", "delete", "3")));
  EXPECT_THAT(text,
              HasSubstr(StoreSample("attnserve_store_latency_seconds_count",
                                    "dir:/x", "read", "0")));
  EXPECT_THAT(
      text, HasSubstr("\nattnserve_store_latency_seconds_bucket{op=\"delete\","
                      "store=\"dir:/x\",le=\"5e-05\"} 3\n"));
  EXPECT_THAT(text, HasSubstr(StoreSample("attnserve_sessions_spilled_total",
                                          "dir:/x", "", "7")));
}

TEST(StoreMetrics, ForStoreReturnsOneChildSetPerStore) {
  auto metrics = MakeMetrics("");
  ASSERT_NE(metrics, nullptr);
  StoreMetrics& a = metrics->ForStore("dir:/a");
  StoreMetrics& b = metrics->ForStore("redis://h:6379");
  EXPECT_EQ(&metrics->ForStore("dir:/a"), &a);
  EXPECT_NE(&b, &a);

  a.ObserveWrite(absl::Milliseconds(1), 10, /*ok=*/true);
  metrics->ForStore("dir:/a").ObserveWrite(absl::Milliseconds(1), 5, true);
  b.AddSpilled(1);
  const std::string text = metrics->Serialize();
  for (const std::string& line : StoreSeries("dir:/a", "2", "0", "15", "0"))
    EXPECT_THAT(text, HasSubstr(line));
  for (const std::string& line :
       StoreSeries("redis://h:6379", "0", "0", "0", "0"))
    EXPECT_THAT(text, HasSubstr(line));
  EXPECT_THAT(text, HasSubstr(StoreSample("attnserve_sessions_spilled_total",
                                          "dir:/a", "", "0")));
  EXPECT_THAT(text, HasSubstr(StoreSample("attnserve_sessions_spilled_total",
                                          "redis://h:6379", "", "1")));
  EXPECT_THAT(text,
              HasSubstr(StoreSample("attnserve_store_latency_seconds_count",
                                    "redis://h:6379", "write", "0")));
}

TEST(StoreMetrics, ConcurrentRecordingLosesNoObservations) {
  auto metrics = MakeMetrics("");
  ASSERT_NE(metrics, nullptr);
  constexpr int kThreads = 8;
  constexpr int kIterations = 1000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&metrics] {
      for (int i = 0; i < kIterations; ++i) {
        StoreMetrics& s = metrics->ForStore("dir:/x");
        s.ObserveWrite(absl::Microseconds(100), 2, /*ok=*/true);
        s.AddSpilled(1);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  const std::string text = metrics->Serialize();
  for (const std::string& line :
       StoreSeries("dir:/x", "8000", "0", "16000", "0"))
    EXPECT_THAT(text, HasSubstr(line));
  EXPECT_THAT(text, HasSubstr(StoreSample("attnserve_sessions_spilled_total",
                                          "dir:/x", "", "8000")));
  EXPECT_THAT(text,
              HasSubstr(StoreSample("attnserve_store_latency_seconds_count",
                                    "dir:/x", "write", "8000")));
}

TEST(Metrics, CreateFailsWhenTheAddressIsInUse) {
  Socket holder;
  ASSERT_GE(holder.fd(), 0);
  sockaddr_in addr = Loopback(0);
  ASSERT_EQ(bind(holder.fd(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)),
            0);
  ASSERT_EQ(listen(holder.fd(), 1), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(getsockname(holder.fd(), reinterpret_cast<sockaddr*>(&addr), &len),
            0);
  const std::string address = absl::StrCat("127.0.0.1:", ntohs(addr.sin_port));

  auto metrics = Metrics::Create(address);
  ASSERT_FALSE(metrics.ok());
  EXPECT_EQ(metrics.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(metrics.status().message(), HasSubstr(address));
}

}  // namespace
}  // namespace attnserve::metrics
