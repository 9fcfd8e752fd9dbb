#include "launcher/local_host.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <vector>

namespace hvdrun {

namespace {

// Every address of this machine's interfaces (getifaddrs).
std::vector<std::string> local_addresses() {
  std::vector<std::string> out;
  ifaddrs* ifs = nullptr;
  if (getifaddrs(&ifs) != 0) return out;
  for (ifaddrs* i = ifs; i; i = i->ifa_next) {
    if (!i->ifa_addr) continue;
    char buf[INET6_ADDRSTRLEN] = {};
    if (i->ifa_addr->sa_family == AF_INET) {
      inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, buf, sizeof buf);
    } else if (i->ifa_addr->sa_family == AF_INET6) {
      inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(i->ifa_addr)->sin6_addr, buf, sizeof buf);
    } else {
      continue;
    }
    out.emplace_back(buf);
  }
  freeifaddrs(ifs);
  return out;
}

}  // namespace

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
  auto addrs = local_addresses();
  return std::find(addrs.begin(), addrs.end(), host) != addrs.end();
}

}  // namespace hvdrun
