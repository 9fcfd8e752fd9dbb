// Network facts of this machine.
#pragma once

#include <string>

#include "common/result.h"

namespace hvdrun {

// The first IPv4 (else IPv6) address of a network interface.
Result<std::string> interface_address(const std::string& iface);
// The name of the interface that holds `addr` (as inet_ntop writes it).
Result<std::string> interface_with_address(const std::string& addr);
// A TCP port free on this machine right now (MASTER_PORT).
Result<int> free_tcp_port();

}  // namespace hvdrun
