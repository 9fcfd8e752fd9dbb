// Network facts of this machine.
#pragma once

#include <string>

#include "common/result.h"

namespace hvdrun {

// The first IPv4 (else IPv6) address of a network interface.
Result<std::string> interface_address(const std::string& iface);

}  // namespace hvdrun
