#include "common/net.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "common/unique_fd.h"

namespace hvdrun {

std::string address_string(const sockaddr* sa) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (sa->sa_family == AF_INET)
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(sa)->sin_addr, buf, sizeof buf);
  else if (sa->sa_family == AF_INET6)
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr, buf, sizeof buf);
  return buf;
}

std::string socket_local_address(int fd) {
  sockaddr_storage sa{};
  socklen_t len = sizeof sa;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len) != 0) return "";
  return address_string(reinterpret_cast<const sockaddr*>(&sa));
}

Result<std::vector<InterfaceAddress>> interface_addresses() {
  ifaddrs* ifs = nullptr;
  if (getifaddrs(&ifs) != 0) return make_error(std::string("getifaddrs: ") + std::strerror(errno));
  std::vector<InterfaceAddress> out;
  for (ifaddrs* i = ifs; i; i = i->ifa_next) {
    if (!i->ifa_addr || (i->ifa_addr->sa_family != AF_INET && i->ifa_addr->sa_family != AF_INET6)) continue;
    out.push_back({i->ifa_name, address_string(i->ifa_addr), i->ifa_addr->sa_family == AF_INET6});
  }
  freeifaddrs(ifs);
  return out;
}

Result<std::string> interface_address(const std::string& iface) {
  auto all = interface_addresses();
  if (!all) return all.error();
  std::string v6;
  for (const auto& a : *all) {
    if (a.iface != iface) continue;
    if (!a.v6) return a.addr;
    if (v6.empty()) v6 = a.addr;
  }
  if (!v6.empty()) return v6;
  return make_error("network interface '" + iface + "' has no IP address (or does not exist)");
}

Result<std::string> interface_with_address(const std::string& addr) {
  auto all = interface_addresses();
  if (!all) return all.error();
  for (const auto& a : *all)
    if (a.addr == addr) return a.iface;
  return make_error("no network interface has the address " + addr);
}

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
