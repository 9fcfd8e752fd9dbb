#include "common/net.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "common/unique_fd.h"

namespace hvdrun {

Result<std::string> interface_address(const std::string& iface) {
  ifaddrs* ifs = nullptr;
  if (getifaddrs(&ifs) != 0) return make_error(std::string("getifaddrs: ") + std::strerror(errno));
  std::string v4, v6;
  for (ifaddrs* i = ifs; i; i = i->ifa_next) {
    if (!i->ifa_addr || iface != i->ifa_name) continue;
    char buf[INET6_ADDRSTRLEN] = {};
    if (i->ifa_addr->sa_family == AF_INET && v4.empty()) {
      inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, buf, sizeof buf);
      v4 = buf;
    } else if (i->ifa_addr->sa_family == AF_INET6 && v6.empty()) {
      inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(i->ifa_addr)->sin6_addr, buf, sizeof buf);
      v6 = buf;
    }
  }
  freeifaddrs(ifs);
  if (!v4.empty()) return v4;
  if (!v6.empty()) return v6;
  return make_error("network interface '" + iface + "' has no IP address (or does not exist)");
}

}  // namespace hvdrun

namespace hvdrun {

Result<std::string> interface_with_address(const std::string& addr) {
  ifaddrs* ifs = nullptr;
  if (getifaddrs(&ifs) != 0) return make_error(std::string("getifaddrs: ") + std::strerror(errno));
  std::string found;
  for (ifaddrs* i = ifs; i && found.empty(); i = i->ifa_next) {
    if (!i->ifa_addr) continue;
    char buf[INET6_ADDRSTRLEN] = {};
    if (i->ifa_addr->sa_family == AF_INET)
      inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, buf, sizeof buf);
    else if (i->ifa_addr->sa_family == AF_INET6)
      inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(i->ifa_addr)->sin6_addr, buf, sizeof buf);
    if (addr == buf) found = i->ifa_name;
  }
  freeifaddrs(ifs);
  if (found.empty()) return make_error("no network interface has the address " + addr);
  return found;
}

}  // namespace hvdrun

namespace hvdrun {

Result<int> free_tcp_port() {
  UniqueFd s(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!s.valid()) return make_error(std::string("socket: ") + std::strerror(errno));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t len = sizeof a;
  if (bind(s.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      getsockname(s.get(), reinterpret_cast<sockaddr*>(&a), &len) != 0)
    return make_error(std::string("bind: ") + std::strerror(errno));
  return static_cast<int>(ntohs(a.sin_port));
}

}  // namespace hvdrun
