// An in-process AttnServer with its HTTP front for the stored-record tests
// (responses_store_test.cc, prefix_cache_test.cc): tenants by API key, JSON over
// loopback, and the store's directory to look into.
#pragma once

#include <gtest/gtest.h>
#include <httplib.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "server/service/server.h"
#include "tests/testing/tiny_model.h"

namespace attnserve::http::testing {

inline constexpr char kAlice[] = "alice-key-0123456789abcdef";
inline constexpr char kBob[] = "bob-key-0123456789abcdef";

// A fresh directory per test, removed afterwards.
inline std::string TestDir(const std::string& what) {
  const std::string dir = ::testing::TempDir() + "/attnserve_" + what + "_" +
                          std::to_string(::getpid()) + "_" +
                          ::testing::UnitTest::GetInstance()->current_test_info()->name();
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// Starts a server on `models` with alice and bob as tenants (`dir`/keys.txt) unless
// `keys` is false; `o` gives the rest (store, budgets, quotas). Ports are ephemeral.
inline std::unique_ptr<service::AttnServer> StartFront(
    config::ServerOptions o, const std::string& dir,
    std::unique_ptr<catalogue::ModelCatalogue> models, bool keys = true) {
  if (keys) {
    const std::string path = dir + "/keys.txt";
    std::ofstream(path) << kAlice << " alice\n" << kBob << " bob\n";
    o.api_keys_file = path;
  }
  o.listen_address = "127.0.0.1:0";
  o.http_listen = "127.0.0.1:0";
  o.metrics_address = "";
  o.threads = 1;
  auto s = service::AttnServer::Start(o, std::move(models));
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? std::move(s).value() : nullptr;
}

// The same on one model.
inline std::unique_ptr<service::AttnServer> StartFront(
    config::ServerOptions o, const std::string& dir,
    std::shared_ptr<const catalogue::ServedModel> model, bool keys = true) {
  return StartFront(std::move(o), dir,
                    std::make_unique<catalogue::ModelCatalogue>(
                        std::vector<std::shared_ptr<const catalogue::ServedModel>>{
                            std::move(model)}),
                    keys);
}

struct Reply {
  int status = 0;
  nlohmann::json body;
};

// `method` ("GET", "POST", "DELETE") on the server's HTTP port as the tenant of `key`.
inline Reply Call(const service::AttnServer& server, const std::string& method,
                  const std::string& path, const std::string& key,
                  const nlohmann::json& body = nullptr) {
  httplib::Client c("127.0.0.1", server.http_port());
  c.set_read_timeout(120);
  const httplib::Headers headers = {{"Authorization", "Bearer " + key}};
  httplib::Result r = method == "GET"    ? c.Get(path.c_str(), headers)
                      : method == "DELETE" ? c.Delete(path.c_str(), headers)
                                           : c.Post(path.c_str(), headers, body.dump(),
                                                    "application/json");
  if (!r) return {};
  return {r->status, nlohmann::json::parse(r->body, nullptr, /*allow_exceptions=*/false)};
}

}  // namespace attnserve::http::testing
