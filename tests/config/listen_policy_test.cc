#include "server/config/listen_policy.h"

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/config/server_options.h"

namespace attnserve::config {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// Parses `args` (without the program name) with `env` as the environment.
absl::StatusOr<ServerOptions> Parse(std::vector<std::string> args,
                                    const std::map<std::string, std::string>& env = {}) {
  args.insert(args.begin(), "attnserve_server");
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  bool help = false;
  return ParseServerOptions(
      static_cast<int>(args.size()), argv.data(),
      [&env](const std::string& name) -> std::optional<std::string> {
        auto it = env.find(name);
        if (it == env.end()) return std::nullopt;
        return it->second;
      },
      &help);
}

ServerOptions Listening(const std::string& address) {
  ServerOptions options;
  options.listen_address = address;
  return options;
}

TEST(IsLoopbackAddressTest, LoopbackAddressesAndUnixSockets) {
  for (const char* address :
       {"127.0.0.1:50051", "127.1.2.3:0", "[::1]:50051", "localhost:50051", "LOCALHOST:1",
        "[::ffff:127.0.0.1]:5", "unix:/tmp/attnserve.sock", "unix-abstract:attnserve"}) {
    EXPECT_TRUE(IsLoopbackAddress(address)) << address;
  }
}

TEST(IsLoopbackAddressTest, WildcardsOtherAddressesAndHostNamesAreNot) {
  for (const char* address :
       {"0.0.0.0:50051", "[::]:50051", ":50051", "10.0.0.2:50051", "128.0.0.1:1",
        "[::2]:1", "[::ffff:10.0.0.1]:5", "attnserve:50051", "localhost.example.com:1",
        "126.255.255.255:1"}) {
    EXPECT_FALSE(IsLoopbackAddress(address)) << address;
  }
}

TEST(CheckListenSecurityTest, RefusesNonLoopbackInTheClearSayingWhatToPass) {
  absl::Status status = CheckListenSecurity(Listening("0.0.0.0:50051"));
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(),
              AllOf(HasSubstr("refusing to listen on 0.0.0.0:50051"),
                    HasSubstr("neither TLS nor API keys"), HasSubstr("--tls_cert=FILE"),
                    HasSubstr("--tls_key=FILE"), HasSubstr("--insecure"),
                    HasSubstr("--listen=127.0.0.1:PORT")));
}

TEST(CheckListenSecurityTest, HttpOffLoopbackNeedsApiKeysOrInsecureEvenWithTls) {
  ServerOptions tls;
  tls.http_listen = "0.0.0.0:8000";
  tls.tls_cert = "cert.pem";
  tls.tls_key = "key.pem";
  absl::Status status = CheckListenSecurity(tls);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), AllOf(HasSubstr("refusing to serve HTTP on 0.0.0.0:8000"),
                                      HasSubstr("--api_keys_file"), HasSubstr("--http_listen=")));
  ServerOptions keys = tls;
  keys.api_keys_file = "keys.txt";
  EXPECT_TRUE(CheckListenSecurity(keys).ok());
  ServerOptions insecure = tls;
  insecure.insecure = true;
  EXPECT_TRUE(CheckListenSecurity(insecure).ok());
  ServerOptions off = tls;
  off.http_listen = "";
  EXPECT_TRUE(CheckListenSecurity(off).ok());
}

TEST(CheckListenSecurityTest, AllowsLoopbackTlsApiKeysOrInsecure) {
  EXPECT_TRUE(CheckListenSecurity(ServerOptions{}).ok()) << "the default is loopback";
  EXPECT_TRUE(CheckListenSecurity(Listening("[::1]:1")).ok());
  ServerOptions tls = Listening("0.0.0.0:50051");
  tls.tls_cert = "cert.pem";
  tls.tls_key = "key.pem";
  EXPECT_TRUE(CheckListenSecurity(tls).ok());
  ServerOptions keys = Listening("0.0.0.0:50051");
  keys.api_keys_file = "keys.txt";
  EXPECT_TRUE(AuthConfigured(keys));
  EXPECT_TRUE(CheckListenSecurity(keys).ok());
  ServerOptions insecure = Listening("0.0.0.0:50051");
  insecure.insecure = true;
  EXPECT_TRUE(CheckListenSecurity(insecure).ok());
}

TEST(ServerOptionsTlsFlagsTest, InsecureIsASwitchWithAnEnvironmentMirror) {
  EXPECT_FALSE(Parse({})->insecure);
  EXPECT_TRUE(Parse({"--insecure"})->insecure);
  // A switch does not swallow the next argument.
  auto options = Parse({"--insecure", "--listen", "0.0.0.0:1"});
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_TRUE(options->insecure);
  EXPECT_EQ(options->listen_address, "0.0.0.0:1");
  EXPECT_FALSE(Parse({"--insecure=false"})->insecure);
  EXPECT_TRUE(Parse({}, {{"ATTNSERVE_INSECURE", "true"}})->insecure);
  EXPECT_FALSE(Parse({"--insecure=false"}, {{"ATTNSERVE_INSECURE", "true"}})->insecure);
  EXPECT_THAT(Parse({"--insecure=maybe"}).status().message(),
              AllOf(HasSubstr("--insecure"), HasSubstr("expected true or false")));
}

TEST(ServerOptionsTlsFlagsTest, CertificateAndKeyGoTogether) {
  auto options = Parse({"--tls_cert=c.pem", "--tls_key=k.pem", "--tls_client_ca=ca.pem"});
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->tls_cert, "c.pem");
  EXPECT_EQ(options->tls_key, "k.pem");
  EXPECT_EQ(options->tls_client_ca, "ca.pem");
  EXPECT_TRUE(TlsConfigured(*options));
  EXPECT_THAT(Parse({"--tls_cert=c.pem"}).status().message(), HasSubstr("TLS needs both"));
  EXPECT_THAT(Parse({}, {{"ATTNSERVE_TLS_KEY", "k.pem"}}).status().message(),
              AllOf(HasSubstr("environment variable ATTNSERVE_TLS_KEY"),
                    HasSubstr("TLS needs both")));
  EXPECT_THAT(Parse({"--tls_client_ca=ca.pem"}).status().message(),
              HasSubstr("needs --tls_cert and --tls_key"));
}

}  // namespace
}  // namespace attnserve::config
