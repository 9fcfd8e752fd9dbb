#include "launcher/addressing.h"

#include <gtest/gtest.h>

namespace hvdrun {
namespace {

// This machine: loopback, 10.0.0.1/24 on ib0, 192.168.1.1/24 on eth1.
const std::vector<InterfaceAddress> kLocal = {
    {"lo", "127.0.0.1", false, 8}, {"ib0", "10.0.0.1", false, 24}, {"eth1", "192.168.1.1", false, 24}};

RemoteView host(const std::string& name, std::vector<InterfaceAddress> ifaces, int port = 5000,
                const std::string& stack = "other") {
  AgentHello h;
  h.version = "x";
  h.ifaces = std::move(ifaces);
  h.ifaces.insert(h.ifaces.begin(), {"lo", "127.0.0.1", false, 8});
  h.free_port = port;
  h.network_stack = stack;
  return {name, h};
}

AddressingInput input(std::vector<RemoteView> remotes, const std::string& rank0 = "localhost") {
  AddressingInput in;
  in.local_ifaces = kLocal;
  in.local_stack = "here";
  in.remotes = std::move(remotes);
  in.rank0_host = rank0;
  return in;
}

TEST(Addressing, LocalJobStaysOnLoopback) {
  auto a = plan_addressing(input({}));
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->bind_addr, "127.0.0.1");
  EXPECT_EQ(a->master_addr, "127.0.0.1");
  EXPECT_EQ(a->master_port, 0);
  EXPECT_EQ(a->local.rendezvous_addr, "127.0.0.1");
  EXPECT_EQ(a->local.iface, "");
}

TEST(Addressing, HostsArePairedWithUsOnTheSubnetWeShare) {
  // No SSH, no connection ends: only the addresses each side has (a kubectl-exec launch).
  auto a = plan_addressing(input({host("n1", {{"ib0", "10.0.0.11", false, 24}}, 5001),
                                  host("n2", {{"eth3", "10.0.0.12", false, 24}, {"docker0", "172.17.0.1", false, 16}}, 5002)}));
  ASSERT_TRUE(a.ok()) << a.error().message;
  EXPECT_EQ(a->bind_addr, "10.0.0.1");
  EXPECT_EQ(a->local.rendezvous_addr, "10.0.0.1");
  EXPECT_EQ(a->local.iface, "ib0");
  EXPECT_EQ(a->remote.at("n2").rendezvous_addr, "10.0.0.1");
  EXPECT_EQ(a->remote.at("n2").host_addr, "10.0.0.12");
  EXPECT_EQ(a->remote.at("n2").iface, "eth3");  // each host's own interface name
  EXPECT_EQ(a->master_addr, "10.0.0.1");
  EXPECT_EQ(a->master_port, 0);
}

TEST(Addressing, GlooInterfaceIsTheOneHoldingTheHostsAddress) {
  auto local = plan_addressing(input({}));
  ASSERT_TRUE(local.ok());
  EXPECT_EQ(local->local.gloo_iface, "lo");  // as horovodrun: the interface of 127.0.0.1
  EXPECT_EQ(local->local.iface, "");         // hvdrun's own choice is unchanged
  auto a = plan_addressing(input({host("n2", {{"eth3", "10.0.0.12", false, 24}}, 5002)}));
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->local.gloo_iface, "ib0");
  EXPECT_EQ(a->remote.at("n2").gloo_iface, "eth3");
}

TEST(Addressing, JobPeersAreOurAddressesAndWhatTheAgentsReported) {
  RemoteView v = host("n1", {{"ib0", "10.0.0.11", false, 24}}, 7);
  v.hello.host_addr = "203.0.113.9";  // its end of the connection, as we saw it (NAT)
  auto in = input({v, host("n2", {{"eth3", "10.0.0.12", false, 24}, {"ib0", "10.0.0.11", false, 24}})});
  EXPECT_EQ(job_peer_addresses(in), (std::vector<std::string>{"127.0.0.1", "10.0.0.1", "192.168.1.1", "10.0.0.11",
                                                                "203.0.113.9", "10.0.0.12"}));
}

TEST(Addressing, RankZeroOnARemoteHostIsTheMaster) {
  auto a = plan_addressing(input({host("n1", {{"ib0", "10.0.0.11", false, 24}}, 5001)}, "n1"));
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->master_addr, "10.0.0.11");
  EXPECT_EQ(a->master_port, 5001);
}

TEST(Addressing, TheConnectionsOwnEndsWin) {
  RemoteView v = host("n1", {{"ib0", "10.0.0.11", false, 24}, {"eth0", "192.168.1.5", false, 24}}, 7, "other");
  v.hello.launcher_addr = "192.168.1.1";
  v.hello.host_addr = "192.168.1.5";
  auto a = plan_addressing(input({v}, "n1"));
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->bind_addr, "192.168.1.1");
  EXPECT_EQ(a->remote.at("n1").iface, "eth0");
  EXPECT_EQ(a->master_addr, "192.168.1.5");
}

TEST(Addressing, OneLauncherAddressForAllWhenThereIsOne) {
  // n1 shares both networks with us, n2 only the second: both use the second.
  auto a = plan_addressing(input({host("n1", {{"ib0", "10.0.0.11", false, 24}, {"eth0", "192.168.1.11", false, 24}}),
                                  host("n2", {{"eth0", "192.168.1.12", false, 24}})}));
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->bind_addr, "192.168.1.1");
  EXPECT_EQ(a->remote.at("n1").host_addr, "192.168.1.11");
}

TEST(Addressing, HostsOnDifferentNetworksGetTheirOwn) {
  auto a = plan_addressing(input({host("n1", {{"ib0", "10.0.0.11", false, 24}}, 1),
                                  host("n2", {{"eth0", "192.168.1.2", false, 24}}, 2)},
                                 "n2"));
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->bind_addr, "0.0.0.0");
  EXPECT_EQ(a->remote.at("n1").rendezvous_addr, "10.0.0.1");
  EXPECT_EQ(a->remote.at("n2").rendezvous_addr, "192.168.1.1");
  EXPECT_EQ(a->master_addr, "192.168.1.2");
}

TEST(Addressing, LoopbackOnlyForTheSameNetworkStack) {
  // Two agents on this machine's own network stack (Slurm nodes of a test cluster).
  auto a = plan_addressing(input({host("n1", {}, 1, "here"), host("n2", {}, 2, "here")}, "n1"));
  ASSERT_TRUE(a.ok()) << a.error().message;
  EXPECT_EQ(a->bind_addr, "127.0.0.1");
  EXPECT_EQ(a->master_addr, "127.0.0.1");
  EXPECT_EQ(a->remote.at("n2").iface, "lo");
  // Another machine's loopback is not ours.
  auto b = plan_addressing(input({host("n1", {{"eth0", "172.30.0.5", false, 16}}, 1, "elsewhere")}));
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.error().message.find("cannot tell which address of this machine n1 reaches: no network in common "
                                   "(its addresses: 172.30.0.5/16; this machine's: 10.0.0.1/24, 192.168.1.1/24); "
                                   "pass --network-interface"),
            std::string::npos)
      << b.error().message;
}

TEST(Addressing, NetworkInterfaceWinsEverywhere) {
  auto in = input({host("n1", {{"ib0", "10.0.0.11", false, 24}, {"eth1", "192.168.1.7", false, 24}}, 1)}, "n1");
  in.iface = "eth1";
  in.iface_addr = "192.168.1.1";
  auto a = plan_addressing(in);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->bind_addr, "192.168.1.1");
  EXPECT_EQ(a->remote.at("n1").rendezvous_addr, "192.168.1.1");
  EXPECT_EQ(a->remote.at("n1").iface, "eth1");
  EXPECT_EQ(a->local.iface, "eth1");
  EXPECT_EQ(a->master_addr, "192.168.1.7");
}

}  // namespace
}  // namespace hvdrun
