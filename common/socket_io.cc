#include "common/socket_io.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>
#include <thread>

namespace hvdrun {
int ms_until(std::chrono::steady_clock::time_point deadline) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
  return ms < 0 ? 0 : static_cast<int>(std::min<long long>(ms, 1 << 30));
}

Result<UniqueFd> connect_tcp(const sockaddr* sa, socklen_t len, std::chrono::steady_clock::time_point deadline) {
  UniqueFd fd(socket(sa->sa_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd.valid()) return make_sys_error(ErrorKind::kSystem, std::string("socket: ") + std::strerror(errno), errno);
  if (::connect(fd.get(), sa, len) != 0) {
    if (errno != EINPROGRESS) return make_sys_error(ErrorKind::kSystem, std::strerror(errno), errno);
    pollfd p{fd.get(), POLLOUT, 0};
    int ready;
    while ((ready = poll(&p, 1, ms_until(deadline))) < 0 && errno == EINTR) {
    }
    if (ready == 0) return make_sys_error(ErrorKind::kTimeout, "connection timed out", ETIMEDOUT);
    if (ready < 0) return make_sys_error(ErrorKind::kSystem, std::string("poll: ") + std::strerror(errno), errno);
    int err = 0;
    socklen_t elen = sizeof err;
    getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &elen);
    if (err == ETIMEDOUT) return make_sys_error(ErrorKind::kTimeout, std::strerror(err), err);
    if (err) return make_sys_error(ErrorKind::kSystem, std::strerror(err), err);
  }
  return fd;
}

namespace {

bool transient_connect_error(int err, Refused refused) {
  switch (err) {
    case EHOSTUNREACH:
    case ENETUNREACH:
    case ENETDOWN:
    case ETIMEDOUT:
    case EAGAIN:
    case EADDRNOTAVAIL:
    case ECONNRESET:
      return true;
    case ECONNREFUSED:
      return refused == Refused::kRetry;
    default:
      return false;
  }
}

}  // namespace

Result<UniqueFd> connect_tcp_retrying(const sockaddr* sa, socklen_t len, std::chrono::steady_clock::time_point deadline,
                                      Refused refused, const std::function<void(int err)>& on_retry) {
  using Clock = std::chrono::steady_clock;
  std::minstd_rand rng(static_cast<unsigned>(Clock::now().time_since_epoch().count()));
  // No route or network for this long is no flap: a wrong interface or address fails
  // then, not at the (maybe minute-long) deadline.
  const auto unreachable_until = Clock::now() + kUnreachableRetry;
  double backoff = 0.01;
  while (true) {
    auto fd = connect_tcp(sa, len, deadline);
    if (fd || !transient_connect_error(fd.error().sys_errno, refused) || Clock::now() >= deadline) return fd;
    if (fd.error().sys_errno != ECONNREFUSED && Clock::now() >= unreachable_until) return fd;
    if (on_retry) on_retry(fd.error().sys_errno);
    double left = std::chrono::duration<double>(deadline - Clock::now()).count();
    double sleep = std::min(backoff * std::uniform_real_distribution<double>(0.5, 1.5)(rng), left);
    std::this_thread::sleep_for(std::chrono::duration<double>(std::max(0.0, sleep)));
    backoff = std::min(backoff * 2, 1.0);
  }
}

namespace {

Status exact(int fd, char* buf, size_t len, bool writing, std::chrono::steady_clock::time_point deadline) {
  size_t off = 0;
  while (off < len) {
    ssize_t n = writing ? ::send(fd, buf + off, len - off, MSG_NOSIGNAL) : ::recv(fd, buf + off, len - off, 0);
    if (n > 0) {
      off += static_cast<size_t>(n);
      continue;
    }
    if (n == 0 && !writing) return make_error(ErrorKind::kPeerLost, "closed by the peer");
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd, static_cast<short>(writing ? POLLOUT : POLLIN), 0};
      if (poll(&p, 1, ms_until(deadline)) == 0) return make_sys_error(ErrorKind::kTimeout, "timed out", ETIMEDOUT);
      continue;
    }
    int err = n < 0 ? errno : EPIPE;
    return make_sys_error(ErrorKind::kSystem, std::strerror(err), err);
  }
  return {};
}

}  // namespace

Status write_exact(int fd, const void* buf, size_t len, std::chrono::steady_clock::time_point deadline) {
  return exact(fd, static_cast<char*>(const_cast<void*>(buf)), len, true, deadline);
}

Status read_exact(int fd, void* buf, size_t len, std::chrono::steady_clock::time_point deadline) {
  return exact(fd, static_cast<char*>(buf), len, false, deadline);
}

}  // namespace hvdrun

namespace hvdrun {

Status write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int err = n < 0 ? errno : EIO;
      return make_sys_error(ErrorKind::kSystem, std::strerror(err), err);
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return {};
}

}  // namespace hvdrun
