// Is a host name this machine? localhost, 127.x, ::1, the hostname, or one of its addresses.
#pragma once

#include <string>
#include <vector>

namespace hvdrun {

bool is_local_host(const std::string& host);
// This machine's non-loopback addresses (getifaddrs), for tests and address selection.
std::vector<std::string> local_addresses();

}  // namespace hvdrun
