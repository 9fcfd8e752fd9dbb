// libFuzzer target: the rendezvous server itself, over real loopback connections. One
// server runs for the whole fuzzing session (its store and registrations carry over, as in
// a long job). Input: byte 0 bit 0 set = authenticate first (the handshake done right, then
// the rest of the input is request frames); clear = the input is what an unauthenticated
// peer sends. After each input the server must still answer a new connection's hello:
// no input may stop it.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <spdlog/spdlog.h>
#include <string>

#include "common/unique_fd.h"
#include "rendezvous/auth.h"
#include "rendezvous/protocol.h"
#include "rendezvous/server.h"

using namespace hvdrun;
using namespace hvdrun::rdv;

namespace {

struct Fixture {
  std::string secret = new_secret();
  std::unique_ptr<Server> server;
  Fixture() {
    spdlog::set_level(spdlog::level::err);
    ServerOptions o;
    o.secret = secret;
    o.handshake_timeout = 1;
    for (int r = 0; r < 4; ++r) o.ranks.push_back({"h", r});
    auto s = Server::start(o, {});
    if (!s) std::abort();
    server = std::move(*s);
  }
};

Fixture& fixture() {
  static Fixture f;
  return f;
}

using Clock = std::chrono::steady_clock;

UniqueFd connect_server(int port) {
  UniqueFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    if (errno != EINTR) std::abort();
    // Interrupted (libFuzzer's alarm): the connection goes on; wait until it is made.
    pollfd pf{fd.get(), POLLOUT, 0};
    while (poll(&pf, 1, 5000) < 0 && errno == EINTR) {
    }
    int err = 0;
    socklen_t len = sizeof err;
    if (getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0 || !(pf.revents & POLLOUT)) std::abort();
  }
  return fd;
}

int local_port(int fd) {
  sockaddr_in a{};
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  return ntohs(a.sin_port);
}

bool write_all(int fd, std::string_view s) {
  while (!s.empty()) {
    ssize_t n = ::send(fd, s.data(), s.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    s.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

// Reads exactly n bytes before the deadline.
bool read_exact(int fd, char* p, size_t n, Clock::time_point deadline) {
  while (n) {
    int ms = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count());
    if (ms <= 0) return false;
    pollfd pf{fd, POLLIN, 0};
    int ready = poll(&pf, 1, ms);
    if (ready < 0 && errno == EINTR) continue;  // libFuzzer's -timeout alarm (SIGALRM)
    if (ready <= 0) return false;
    ssize_t r = ::read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

// Reads until EOF or the deadline (the answers are drained, so the server never waits on us).
void drain(int fd, Clock::time_point deadline) {
  char buf[65536];
  while (true) {
    int ms = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count());
    if (ms <= 0) return;
    pollfd pf{fd, POLLIN, 0};
    int ready = poll(&pf, 1, ms);
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) return;
    ssize_t r = ::read(fd, buf, sizeof buf);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return;
  }
}

void diag(const char* what, Fixture& f, int port, int fd) {
  std::fprintf(stderr, "%s (registered %d, rejected %d, waiting %d), client port %d\n", what,
               f.server->registered(), f.server->rejected(), f.server->waiting(), local_port(fd));
  std::string cmd = "ss -tanpi | grep -v TIME-WAIT | grep -A1 -E ':" + std::to_string(port) + "\\b' ; ls /proc/" +
                    std::to_string(getpid()) + "/fd | wc -l";
  if (std::system(cmd.c_str()) != 0) std::fprintf(stderr, "(ss failed)\n");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Fixture& f = fixture();
  int port = f.server->port();
  std::string_view in(reinterpret_cast<const char*>(data), size);
  bool authenticate = !in.empty() && (in[0] & 1);
  if (!in.empty()) in.remove_prefix(1);
  {
    UniqueFd fd = connect_server(port);
    auto deadline = Clock::now() + std::chrono::milliseconds(500);
    if (authenticate) {
      std::string cn = random_bytes(kNonceBytes);
      write_all(fd.get(), encode_frame(MsgType::kHello, cn));
      char hdr[4];
      std::string body(2 + kNonceBytes + kMacBytes, '\0');
      if (!read_exact(fd.get(), hdr, 4, deadline) || !read_exact(fd.get(), body.data(), body.size(), deadline))
        diag("the server did not answer a good hello", f, port, fd.get()), std::abort();
      std::string sn = body.substr(2, kNonceBytes);
      write_all(fd.get(), encode_frame(MsgType::kAuth, client_proof(f.secret, sn, cn)));
    }
    write_all(fd.get(), in);
    ::shutdown(fd.get(), SHUT_WR);
    drain(fd.get(), deadline);
  }
  // Still serving: a new connection's hello gets its challenge.
  UniqueFd probe = connect_server(port);
  write_all(probe.get(), encode_frame(MsgType::kHello, random_bytes(kNonceBytes)));
  char hdr[4];
  if (!read_exact(probe.get(), hdr, 4, Clock::now() + std::chrono::seconds(5))) {
    diag("the rendezvous server stopped answering", f, port, probe.get());
    std::abort();
  }
  return 0;
}
