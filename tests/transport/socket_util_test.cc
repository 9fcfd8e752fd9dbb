// The data plane's TCP helpers (transport/socket_util): real sockets on loopback.
#include "transport/socket_util.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

namespace hvdrun::transport {
namespace {

int connect_to(const char* addr, int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, addr, &a.sin_addr);
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

TEST(ListenTcp, ListensOnAnOsChosenPortAndAdvertisesWhatItIsTold) {
  auto l = listen_tcp("127.0.0.1", "10.0.0.5");
  ASSERT_TRUE(l.ok()) << l.error().message;
  EXPECT_GT(l->port, 0);
  EXPECT_EQ(l->addr, "10.0.0.5");
  EXPECT_TRUE(fcntl(l->fd.get(), F_GETFD) & FD_CLOEXEC);
  int c = connect_to("127.0.0.1", l->port);
  ASSERT_GE(c, 0);
  close(c);
  auto any = listen_tcp("", "h");  // every address
  ASSERT_TRUE(any.ok()) << any.error().message;
  EXPECT_NE(any->port, l->port);
  c = connect_to("127.0.0.1", any->port);
  EXPECT_GE(c, 0);
  if (c >= 0) close(c);
  auto v6 = listen_tcp("::1", "::1");
  if (v6.ok()) {  // (a host without IPv6 refuses ::1: not this unit's fault)
    EXPECT_GT(v6->port, 0);
  }
}

TEST(ListenTcp, ABadAddressIsAnErrorNamingIt) {
  for (const char* bad : {"localhost", "1.2.3", "::zz"}) {
    auto l = listen_tcp(bad, "x");
    ASSERT_FALSE(l.ok()) << bad;
    EXPECT_EQ(l.error().message, std::string("bad listen address '") + bad + "'");
  }
  auto foreign = listen_tcp("203.0.113.9", "x");  // not this machine's
  ASSERT_FALSE(foreign.ok());
  EXPECT_EQ(foreign.error().message.rfind("listen on 203.0.113.9: ", 0), 0u) << foreign.error().message;
}

TEST(TuneDataSocket, NoDelayBuffersAndCloseOnExec) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);  // without SOCK_CLOEXEC
  ASSERT_GE(fd, 0);
  tune_data_socket(fd, 1 << 20);
  int v = 0;
  socklen_t len = sizeof v;
  ASSERT_EQ(getsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &v, &len), 0);
  EXPECT_NE(v, 0);
  ASSERT_EQ(getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &v, &len), 0);
  int untuned = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), dflt = 0;
  ASSERT_EQ(getsockopt(untuned, SOL_SOCKET, SO_SNDBUF, &dflt, &len), 0);
  close(untuned);
  EXPECT_GT(v, dflt);  // asked for 1 MiB (the kernel doubles it, up to twice wmem_max)
  EXPECT_TRUE(fcntl(fd, F_GETFD) & FD_CLOEXEC);
  close(fd);
}

}  // namespace
}  // namespace hvdrun::transport
