// Network facts of this machine.
#pragma once

#include <sys/socket.h>

#include <string>
#include <vector>

#include "common/result.h"

namespace hvdrun {

// An IPv4 or IPv6 address as inet_ntop writes it; "" for another family.
std::string address_string(const sockaddr* sa);
// This side's address of a connected socket; "" when unknown.
std::string socket_local_address(int fd);
// The far side's address of a connected socket; "" when unknown.
std::string socket_peer_address(int fd);

struct InterfaceAddress {
  std::string iface, addr;
  bool v6 = false;
  int prefix = 0;  // netmask length (24 for 255.255.255.0)
  bool operator==(const InterfaceAddress&) const = default;
};
// Do `a` and `b` (as inet_ntop writes them, same family) share their first `prefix` bits?
bool same_subnet(const std::string& a, const std::string& b, int prefix);
// Which network stack this process sees: the boot id and the network namespace. Two
// processes with the same value reach each other on 127.0.0.1.
std::string network_stack_id();
// Every IP address of this machine's interfaces, in getifaddrs order.
Result<std::vector<InterfaceAddress>> interface_addresses();

// The first IPv4 (else IPv6) address of a network interface.
Result<std::string> interface_address(const std::string& iface);
// The name of the interface that holds `addr` (as inet_ntop writes it).
Result<std::string> interface_with_address(const std::string& addr);
// A TCP port free on this machine right now (MASTER_PORT).
Result<int> free_tcp_port();

}  // namespace hvdrun
