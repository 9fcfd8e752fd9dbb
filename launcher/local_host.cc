#include "launcher/local_host.h"

#include <arpa/inet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "common/net.h"

namespace hvdrun {

bool is_local_host(const std::string& host) {
  if (host == "localhost" || host == "localhost.localdomain" || host == "::1" || host == "0.0.0.0") return true;
  in_addr a4{};
  if (inet_pton(AF_INET, host.c_str(), &a4) == 1 && (ntohl(a4.s_addr) >> 24) == 127) return true;
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) == 0) {
    std::string h(name);
    if (host == h) return true;
    size_t dot = h.find('.');
    if (dot != std::string::npos && host == h.substr(0, dot)) return true;
  }
  auto addrs = interface_addresses();
  if (!addrs) return false;
  return std::any_of(addrs->begin(), addrs->end(), [&](const InterfaceAddress& a) { return a.addr == host; });
}

}  // namespace hvdrun
