#include "common/socket_io.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <future>
#include <gtest/gtest.h>

using namespace hvdrun;
using Clock = std::chrono::steady_clock;

namespace {

// A loopback port that is bound but not listening: a connect to it is refused, and no
// other test can take the port meanwhile.
struct HeldPort {
  UniqueFd fd{socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)};
  sockaddr_in sa{};
  HeldPort() {
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
    socklen_t len = sizeof sa;
    EXPECT_EQ(getsockname(fd.get(), reinterpret_cast<sockaddr*>(&sa), &len), 0);
  }
  const sockaddr* addr() const { return reinterpret_cast<const sockaddr*>(&sa); }
};

}  // namespace

TEST(ConnectTcpRetrying, ARefusalIsFinalWhenTheCallerSaysSo) {
  HeldPort port;
  auto start = Clock::now();
  int retries = 0;
  auto fd = connect_tcp_retrying(port.addr(), sizeof port.sa, start + std::chrono::seconds(20), Refused::kFinal,
                                 [&](int) { ++retries; });
  ASSERT_FALSE(fd.ok());
  EXPECT_EQ(fd.error().sys_errno, ECONNREFUSED);
  EXPECT_EQ(retries, 0);  // not retried until the deadline
}

TEST(ConnectTcpRetrying, ARefusedConnectionIsRetriedUntilTheServerListens) {
  HeldPort port;
  // The port listens once a try was refused (and not before: then nothing was retried).
  std::promise<void> refused;
  int refusals = 0;
  auto listening = std::async(std::launch::async, [&port, f = refused.get_future()] {
    if (f.wait_for(std::chrono::seconds(20)) != std::future_status::ready) return -2;
    return listen(port.fd.get(), 4);
  });
  auto fd = connect_tcp_retrying(port.addr(), sizeof port.sa, Clock::now() + std::chrono::seconds(20), Refused::kRetry,
                                 [&](int err) {
                                   EXPECT_EQ(err, ECONNREFUSED);
                                   if (refusals++ == 0) refused.set_value();
                                 });
  EXPECT_EQ(listening.get(), 0);
  ASSERT_TRUE(fd.ok()) << fd.error().message;
  EXPECT_TRUE(fd->valid());
  EXPECT_GE(refusals, 1);
}

TEST(ConnectTcpRetrying, TheLastErrorOnceTheDeadlineHasPassed) {
  HeldPort port;
  auto deadline = Clock::now() + std::chrono::milliseconds(300);
  int retries = 0;
  auto fd = connect_tcp_retrying(port.addr(), sizeof port.sa, deadline, Refused::kRetry, [&](int) { ++retries; });
  ASSERT_FALSE(fd.ok());
  EXPECT_EQ(fd.error().sys_errno, ECONNREFUSED);
  EXPECT_GE(Clock::now(), deadline);  // it kept trying until the deadline
  EXPECT_GE(retries, 2);
}
