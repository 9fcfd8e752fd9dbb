// This machine's network facts (common/net): real sockets and interfaces (loopback is
// always there).
#include "common/net.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <gtest/gtest.h>

#include "common/unique_fd.h"

namespace hvdrun {
namespace {

TEST(Net, AddressStringsOfBothFamiliesAndNothingElse) {
  sockaddr_in v4{};
  v4.sin_family = AF_INET;
  inet_pton(AF_INET, "10.1.2.3", &v4.sin_addr);
  EXPECT_EQ(address_string(reinterpret_cast<sockaddr*>(&v4)), "10.1.2.3");
  sockaddr_in6 v6{};
  v6.sin6_family = AF_INET6;
  inet_pton(AF_INET6, "fe80::1", &v6.sin6_addr);
  EXPECT_EQ(address_string(reinterpret_cast<sockaddr*>(&v6)), "fe80::1");
  sockaddr_un un{};
  un.sun_family = AF_UNIX;
  EXPECT_EQ(address_string(reinterpret_cast<sockaddr*>(&un)), "");
}

TEST(Net, BothEndsOfALoopbackConnection) {
  UniqueFd lst(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(lst.get(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(listen(lst.get(), 1), 0);
  socklen_t len = sizeof a;
  getsockname(lst.get(), reinterpret_cast<sockaddr*>(&a), &len);
  UniqueFd c(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  ASSERT_EQ(connect(c.get(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  EXPECT_EQ(socket_local_address(c.get()), "127.0.0.1");
  EXPECT_EQ(socket_peer_address(c.get()), "127.0.0.1");
  EXPECT_EQ(socket_peer_address(lst.get()), "");  // not connected
  EXPECT_EQ(socket_local_address(-1), "");
}

TEST(Net, SameSubnetComparesThePrefixBits) {
  EXPECT_TRUE(same_subnet("10.1.2.3", "10.1.200.4", 16));
  EXPECT_FALSE(same_subnet("10.1.2.3", "10.2.2.3", 16));
  EXPECT_TRUE(same_subnet("10.1.2.3", "10.1.2.255", 24));
  EXPECT_FALSE(same_subnet("10.1.2.3", "10.1.3.3", 24));
  EXPECT_TRUE(same_subnet("192.168.1.1", "192.168.1.1", 32));
  EXPECT_FALSE(same_subnet("10.1.2.3", "10.1.2.2", 32));
  EXPECT_TRUE(same_subnet("fd00::1", "fd00::2", 64));
  EXPECT_FALSE(same_subnet("fd00::1", "fd01::1", 64));
  EXPECT_FALSE(same_subnet("10.1.2.3", "fd00::1", 0));  // not the same family
  EXPECT_FALSE(same_subnet("10.1.2.3", "not an address", 0));
}

TEST(Net, LoopbackIsAnInterfaceAddress) {
  auto all = interface_addresses();
  ASSERT_TRUE(all.ok()) << all.error().message;
  auto lo = std::find_if(all->begin(), all->end(), [](const InterfaceAddress& i) { return i.addr == "127.0.0.1"; });
  ASSERT_NE(lo, all->end());
  EXPECT_FALSE(lo->v6);
  EXPECT_EQ(lo->prefix, 8);
  EXPECT_EQ(*interface_address(lo->iface), "127.0.0.1");
  EXPECT_EQ(*interface_with_address("127.0.0.1"), lo->iface);
  auto none = interface_address("nosuchif0");
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.error().message, "network interface 'nosuchif0' has no IP address (or does not exist)");
  auto nobody = interface_with_address("203.0.113.77");
  ASSERT_FALSE(nobody.ok());
  EXPECT_EQ(nobody.error().message, "no network interface has the address 203.0.113.77");
}

TEST(Net, AFreePortCanBeBoundAndTheStackIdIsStable) {
  auto port = free_tcp_port();
  ASSERT_TRUE(port.ok()) << port.error().message;
  UniqueFd s(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(*port));
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  EXPECT_EQ(bind(s.get(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0) << *port;
  EXPECT_FALSE(network_stack_id().empty());
  EXPECT_EQ(network_stack_id(), network_stack_id());
}

}  // namespace
}  // namespace hvdrun
