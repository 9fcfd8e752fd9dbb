// Is a host name this machine? localhost, 127.x, ::1, the hostname, or one of its addresses.
#pragma once

#include <string>

namespace hvdrun {

bool is_local_host(const std::string& host);

}  // namespace hvdrun
