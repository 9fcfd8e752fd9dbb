#include "launcher/addressing.h"

#include <gtest/gtest.h>

namespace hvdrun {
namespace {

std::string iface_of(const std::string& addr) { return addr == "10.0.0.1" ? "ib0" : addr == "192.168.1.1" ? "eth1" : ""; }

RemoteView host(const std::string& name, const std::string& launcher, const std::string& self, const std::string& iface,
                int port) {
  AgentHello h;
  h.launcher_addr = launcher;
  h.host_addr = self;
  h.host_iface = iface;
  h.free_port = port;
  return {name, h};
}

TEST(Addressing, LocalJobStaysOnLoopback) {
  auto a = plan_addressing("", "", {}, "localhost", iface_of);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->bind_addr, "127.0.0.1");
  EXPECT_EQ(a->master_addr, "127.0.0.1");
  EXPECT_EQ(a->master_port, 0);
  EXPECT_EQ(a->local.rendezvous_addr, "127.0.0.1");
  EXPECT_EQ(a->local.iface, "");
}

TEST(Addressing, RemoteHostsUseTheAddressTheySeeUsAt) {
  auto a = plan_addressing("", "", {host("n1", "10.0.0.1", "10.0.0.11", "ib0", 5001), host("n2", "10.0.0.1", "10.0.0.12", "eth3", 5002)},
                           "localhost", iface_of);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->bind_addr, "10.0.0.1");
  EXPECT_EQ(a->local.rendezvous_addr, "10.0.0.1");
  EXPECT_EQ(a->local.iface, "ib0");
  EXPECT_EQ(a->remote.at("n2").rendezvous_addr, "10.0.0.1");
  EXPECT_EQ(a->remote.at("n2").iface, "eth3");  // each host's own interface name
  EXPECT_EQ(a->master_addr, "10.0.0.1");
  EXPECT_EQ(a->master_port, 0);
}

TEST(Addressing, RankZeroOnARemoteHostIsTheMaster) {
  auto a = plan_addressing("", "", {host("n1", "10.0.0.1", "10.0.0.11", "ib0", 5001)}, "n1", iface_of);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->master_addr, "10.0.0.11");
  EXPECT_EQ(a->master_port, 5001);
}

TEST(Addressing, HostsThatSeeUsOnDifferentAddressesGetTheirOwn) {
  auto a = plan_addressing("", "", {host("n1", "10.0.0.1", "10.0.0.11", "ib0", 1), host("n2", "192.168.1.1", "192.168.1.2", "eth0", 2)},
                           "n2", iface_of);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->bind_addr, "0.0.0.0");
  EXPECT_EQ(a->remote.at("n1").rendezvous_addr, "10.0.0.1");
  EXPECT_EQ(a->remote.at("n2").rendezvous_addr, "192.168.1.1");
  EXPECT_EQ(a->master_addr, "192.168.1.2");
}

TEST(Addressing, NetworkInterfaceWinsEverywhere) {
  auto a = plan_addressing("eth1", "192.168.1.1", {host("n1", "10.0.0.1", "10.0.0.11", "ib0", 1)}, "localhost", iface_of);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->bind_addr, "192.168.1.1");
  EXPECT_EQ(a->remote.at("n1").rendezvous_addr, "192.168.1.1");
  EXPECT_EQ(a->remote.at("n1").iface, "eth1");
  EXPECT_EQ(a->local.iface, "eth1");
  EXPECT_EQ(a->master_addr, "192.168.1.1");
}

TEST(Addressing, AHostThatCannotSayIsAnError) {
  auto a = plan_addressing("", "", {host("n1", "", "", "", 1)}, "localhost", iface_of);
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.error().message.find("cannot tell which address of this machine n1 reaches; pass --network-interface"),
            std::string::npos);
}

}  // namespace
}  // namespace hvdrun
