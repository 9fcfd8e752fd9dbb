#include "common/socket_io.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <future>
#include <gtest/gtest.h>
#include <thread>

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

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

}  // namespace

TEST(ConnectTcpRetrying, ARefusalIsFinalWhenTheCallerSaysSo) {
  HeldPort port;
  auto start = Clock::now();
  auto fd = connect_tcp_retrying(port.addr(), sizeof port.sa, start + std::chrono::seconds(20), Refused::kFinal);
  ASSERT_FALSE(fd.ok());
  EXPECT_EQ(fd.error().sys_errno, ECONNREFUSED);
  EXPECT_LT(seconds_since(start), 10.0);  // not retried until the deadline
}

TEST(ConnectTcpRetrying, ARefusedConnectionIsRetriedUntilTheServerListens) {
  HeldPort port;
  auto listening = std::async(std::launch::async, [&port] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    return listen(port.fd.get(), 4);
  });
  auto fd = connect_tcp_retrying(port.addr(), sizeof port.sa, Clock::now() + std::chrono::seconds(20), Refused::kRetry);
  EXPECT_EQ(listening.get(), 0);
  ASSERT_TRUE(fd.ok()) << fd.error().message;
  EXPECT_TRUE(fd->valid());
}

TEST(ConnectTcpRetrying, TheLastErrorOnceTheDeadlineHasPassed) {
  HeldPort port;
  auto start = Clock::now();
  auto fd = connect_tcp_retrying(port.addr(), sizeof port.sa, start + std::chrono::milliseconds(300), Refused::kRetry);
  ASSERT_FALSE(fd.ok());
  EXPECT_EQ(fd.error().sys_errno, ECONNREFUSED);
  EXPECT_GE(seconds_since(start), 0.29);  // it kept trying until the deadline
}
