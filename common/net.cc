#include "common/net.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
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

std::string socket_peer_address(int fd) {
  sockaddr_storage sa{};
  socklen_t len = sizeof sa;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&sa), &len) != 0) return "";
  return address_string(reinterpret_cast<const sockaddr*>(&sa));
}

Result<std::vector<InterfaceAddress>> interface_addresses() {
  ifaddrs* ifs = nullptr;
  if (getifaddrs(&ifs) != 0) return make_sys_error(ErrorKind::kSystem,
                                                   std::string("getifaddrs: ") + std::strerror(errno), errno);
  std::vector<InterfaceAddress> out;
  for (ifaddrs* i = ifs; i; i = i->ifa_next) {
    if (!i->ifa_addr || (i->ifa_addr->sa_family != AF_INET && i->ifa_addr->sa_family != AF_INET6)) continue;
    InterfaceAddress a{i->ifa_name, address_string(i->ifa_addr), i->ifa_addr->sa_family == AF_INET6, 0};
    if (i->ifa_netmask) {
      const auto* m = i->ifa_addr->sa_family == AF_INET
                          ? reinterpret_cast<const unsigned char*>(&reinterpret_cast<const sockaddr_in*>(i->ifa_netmask)->sin_addr)
                          : reinterpret_cast<const unsigned char*>(&reinterpret_cast<const sockaddr_in6*>(i->ifa_netmask)->sin6_addr);
      for (size_t b = 0; b < (a.v6 ? 16u : 4u); ++b) a.prefix += __builtin_popcount(m[b]);
    }
    out.push_back(std::move(a));
  }
  freeifaddrs(ifs);
  return out;
}

bool same_subnet(const std::string& a, const std::string& b, int prefix) {
  unsigned char x[16] = {}, y[16] = {};
  bool v6 = a.find(':') != std::string::npos;
  if (v6 != (b.find(':') != std::string::npos)) return false;
  int fam = v6 ? AF_INET6 : AF_INET;
  if (inet_pton(fam, a.c_str(), x) != 1 || inet_pton(fam, b.c_str(), y) != 1) return false;
  int bits = std::min(prefix, v6 ? 128 : 32);
  for (int i = 0; i < bits; ++i) {
    int mask = 0x80 >> (i % 8);
    if ((x[i / 8] & mask) != (y[i / 8] & mask)) return false;
  }
  return true;
}

std::string network_stack_id() {
  std::string boot;
  if (FILE* f = std::fopen("/proc/sys/kernel/random/boot_id", "r")) {
    char buf[64] = {};
    if (std::fgets(buf, sizeof buf, f)) boot = buf;
    std::fclose(f);
  }
  while (!boot.empty() && (boot.back() == '\n' || boot.back() == ' ')) boot.pop_back();
  struct stat st {};
  if (boot.empty() || stat("/proc/self/ns/net", &st) != 0) return "";
  return boot + ":" + std::to_string(static_cast<unsigned long>(st.st_ino));
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
  return make_error(ErrorKind::kInvalidArgument,
                    "network interface '" + iface + "' has no IP address (or does not exist)");
}

Result<std::string> interface_with_address(const std::string& addr) {
  auto all = interface_addresses();
  if (!all) return all.error();
  for (const auto& a : *all)
    if (a.addr == addr) return a.iface;
  return make_error(ErrorKind::kInvalidArgument, "no network interface has the address " + addr);
}

Result<int> free_tcp_port() {
  UniqueFd s(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!s.valid()) return make_sys_error(ErrorKind::kSystem, std::string("socket: ") + std::strerror(errno), errno);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t len = sizeof a;
  if (bind(s.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      getsockname(s.get(), reinterpret_cast<sockaddr*>(&a), &len) != 0)
    return make_sys_error(ErrorKind::kSystem, std::string("bind: ") + std::strerror(errno), errno);
  return static_cast<int>(ntohs(a.sin_port));
}

}  // namespace hvdrun
