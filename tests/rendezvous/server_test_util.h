// The rendezvous server tests' shared parts: a server in-process with its callbacks'
// records (Fixture), raw connections for misbehaving clients (RawSession: authenticated,
// then frames at will), deadline-bounded waits, the process's peak resident size.
#pragma once

#include "rendezvous/server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <future>
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <sstream>
#include <thread>

#include "common/unique_fd.h"
#include "rendezvous/auth.h"
#include "rendezvous/client.h"

namespace hvdrun::rdv::server_test {

inline Clock::time_point in(double s) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

struct Fixture {
  std::string secret = new_secret();
  std::unique_ptr<Server> server;
  std::mutex mu;
  std::vector<std::string> fatal, timeouts, lost;

  explicit Fixture(int size, double start_timeout = 0, double handshake_timeout = 10) {
    ServerOptions o;
    o.secret = secret;
    o.start_timeout = start_timeout;
    o.handshake_timeout = handshake_timeout;
    for (int r = 0; r < size; ++r) o.ranks.push_back({"host" + std::to_string(r / 2), r % 2});
    ServerCallbacks cb;
    cb.on_fatal = [this](int rank, const std::string& m) {
      std::lock_guard<std::mutex> lk(mu);
      fatal.push_back(std::to_string(rank) + ": " + m);
    };
    cb.on_lost = [this](int rank, int peer) {
      std::lock_guard<std::mutex> lk(mu);
      lost.push_back(std::to_string(rank) + "->" + std::to_string(peer));
    };
    cb.on_start_timeout = [this](const std::string& m) {
      std::lock_guard<std::mutex> lk(mu);
      timeouts.push_back(m);
    };
    auto s = Server::start(o, cb);
    EXPECT_TRUE(s.ok());
    server = std::move(*s);
  }

  Client connect(const std::string& key = "") {
    auto c = Client::connect("127.0.0.1", server->port(), key.empty() ? secret : key, in(10));
    EXPECT_TRUE(c.ok()) << c.error().message;
    return std::move(*c);
  }

  // Runs a whole job of `size` client threads: connect, register, barrier.
  void run_job(int size) {
    std::vector<std::future<std::string>> ranks;
    for (int r = 0; r < size; ++r)
      ranks.push_back(std::async(std::launch::async, [this, r, size]() -> std::string {
        auto c = Client::connect("127.0.0.1", server->port(), secret, in(10));
        if (!c) return c.error().message;
        auto g = c->register_rank({r, size, "h", "127.0.0.1", 1000 + r}, in(10));
        if (!g) return g.error().message;
        if (g->left.rank != (r + size - 1) % size || g->right.rank != (r + 1) % size) return "wrong neighbours";
        if (g->right.port != 1000 + (r + 1) % size) return "wrong neighbour port";
        auto b = c->barrier("b", size, 10);
        return b ? "" : b.error().message;
      }));
    for (auto& f : ranks) EXPECT_EQ(f.get(), "");
  }
};

// A raw TCP connection to the server, for misbehaving clients.
inline UniqueFd raw_connect(int port) {
  UniqueFd fd(socket(AF_INET, SOCK_STREAM, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  return fd;
}

// True when the server closes the connection within `seconds` (reads until EOF).
inline bool closed_by_server(int fd, double seconds) {
  auto deadline = in(seconds);
  char buf[256];
  while (Clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 50) <= 0) continue;
    ssize_t n = read(fd, buf, sizeof buf);
    if (n <= 0) return true;
  }
  return false;
}

inline void wait_rejected(Server& s, int n) {
  auto deadline = in(5);
  while (s.rejected() < n && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(5));
}

// Waits (at most 10 s) until `count()` reaches `n`; false if it never does.
template <class Count>
inline bool wait_count(Count count, int n) {
  auto deadline = in(10);
  while (count() < n)
    if (Clock::now() >= deadline) return false;
    else std::this_thread::sleep_for(std::chrono::milliseconds(2));
  return true;
}
inline bool wait_registered(Server& s, int n) { return wait_count([&] { return s.registered(); }, n); }
inline bool wait_waiting(Server& s, int n) { return wait_count([&] { return s.waiting(); }, n); }


// An authenticated raw connection: the handshake done by hand, then frames at will.
struct RawSession {
  UniqueFd fd;
  RawSession(int port, const std::string& secret) : fd(raw_connect(port)) {
    std::string cn = random_bytes(kNonceBytes);
    send(MsgType::kHello, cn);
    Frame ch = recv();
    std::string sn = ch.payload.substr(0, kNonceBytes);
    send(MsgType::kAuth, client_proof(secret, sn, cn));
  }
  void send(MsgType t, std::string_view payload) {
    std::string f = encode_frame(t, payload);
    size_t off = 0;
    while (off < f.size()) {
      ssize_t n = write(fd.get(), f.data() + off, f.size() - off);
      ASSERT_GT(n, 0);
      off += static_cast<size_t>(n);
    }
  }
  bool read_exact(char* p, size_t n, double seconds) {
    auto deadline = in(seconds);
    while (n) {
      pollfd pf{fd.get(), POLLIN, 0};
      if (Clock::now() > deadline) return false;
      if (poll(&pf, 1, 50) <= 0) continue;
      ssize_t r = read(fd.get(), p, n);
      if (r <= 0) return false;
      p += r;
      n -= static_cast<size_t>(r);
    }
    return true;
  }
  Frame recv(double seconds = 5) {
    char hdr[4];
    if (!read_exact(hdr, 4, seconds)) return Frame{kProtocolVersion, MsgType::kAuthOk, "(no frame)"};
    auto len = decode_length(hdr, kMaxFrame);
    if (!len) return Frame{kProtocolVersion, MsgType::kAuthOk, "(bad length)"};
    std::string body(*len, '\0');
    if (!read_exact(body.data(), body.size(), seconds)) return Frame{kProtocolVersion, MsgType::kAuthOk, "(short)"};
    return *decode_body(body);
  }
  // The error message of an error frame ("" for another frame).
  std::string error(double seconds = 5) {
    Frame f = recv(seconds);
    if (f.type != MsgType::kError) return std::string("not an error: ") + msg_type_name(f.type);
    return *decode_string(f.payload);
  }
};

// The process's peak resident size (VmHWM) since the last reset_peak_rss(), in KiB.
inline long peak_rss_kib() {
  FILE* f = fopen("/proc/self/status", "r");
  char line[256];
  long kib = 0;
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "VmHWM: %ld kB", &kib) == 1) break;
  if (f) fclose(f);
  return kib;
}

// Resets VmHWM to the current resident size (proc(5), /proc/PID/clear_refs "5").
inline bool reset_peak_rss() {
  FILE* f = fopen("/proc/self/clear_refs", "w");
  if (!f) return false;
  bool ok = fputs("5", f) >= 0;
  return fclose(f) == 0 && ok;
}

inline bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// The server still answers: a fresh client sets, reads and completes a barrier.
inline void server_still_serves(Fixture& f) {
  Client c = f.connect();
  ASSERT_TRUE(c.set("alive", "yes").ok());
  auto v = c.get("alive");
  ASSERT_TRUE(v.ok()) << v.error().message;
  EXPECT_EQ(*v, "yes");
  EXPECT_TRUE(c.barrier("alive-barrier", 1, 5).ok());
}

}  // namespace hvdrun::rdv::server_test
