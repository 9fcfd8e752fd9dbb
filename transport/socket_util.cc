#include "transport/socket_util.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

namespace hvdrun::transport {

Result<Listener> listen_tcp(const std::string& bind_addr, const std::string& advertise_addr) {
  sockaddr_storage ss{};
  socklen_t len;
  bool v6 = bind_addr.find(':') != std::string::npos;
  if (v6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
    a->sin6_family = AF_INET6;
    if (inet_pton(AF_INET6, bind_addr.c_str(), &a->sin6_addr) != 1)
      return make_error(ErrorKind::kInvalidArgument, "bad listen address '" + bind_addr + "'");
    len = sizeof *a;
  } else {
    auto* a = reinterpret_cast<sockaddr_in*>(&ss);
    a->sin_family = AF_INET;
    if (bind_addr.empty())
      a->sin_addr.s_addr = htonl(INADDR_ANY);
    else if (inet_pton(AF_INET, bind_addr.c_str(), &a->sin_addr) != 1)
      return make_error(ErrorKind::kInvalidArgument, "bad listen address '" + bind_addr + "'");
    len = sizeof *a;
  }
  Listener l;
  l.fd.reset(socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!l.fd.valid()) return make_sys_error(ErrorKind::kSystem, std::string("socket: ") + std::strerror(errno), errno);
  int one = 1;
  setsockopt(l.fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(l.fd.get(), reinterpret_cast<sockaddr*>(&ss), len) != 0 || listen(l.fd.get(), 1024) != 0)
    return make_sys_error(ErrorKind::kSystem,
                          "listen on " + (bind_addr.empty() ? std::string("*") : bind_addr) + ": " + std::strerror(errno), errno);
  socklen_t sl = sizeof ss;
  getsockname(l.fd.get(), reinterpret_cast<sockaddr*>(&ss), &sl);
  l.port = ntohs(v6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  l.addr = advertise_addr;
  return l;
}

void tune_data_socket(int fd, int buffer_bytes) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (buffer_bytes > 0) {
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buffer_bytes, sizeof buffer_bytes);
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buffer_bytes, sizeof buffer_bytes);
  }
  fcntl(fd, F_SETFD, FD_CLOEXEC);
}

}  // namespace hvdrun::transport
