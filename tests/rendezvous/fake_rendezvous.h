// A rendezvous server for tests of the worker's elastic side, which the real server does not
// serve yet in every branch: elastic rounds (a register for another round is answered
// kStaleRound, as docs/ELASTIC.md says), and the store (set, get, wait) that the test also
// writes as hvdrun would. One thread per connection, blocking sockets; every wait bounded.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/socket_io.h"
#include "common/unique_fd.h"
#include "rendezvous/auth.h"
#include "rendezvous/protocol.h"

namespace hvdrun::rdv {

class FakeRendezvous {
 public:
  explicit FakeRendezvous(std::string secret) : secret_(std::move(secret)) {
    listen_fd_ = UniqueFd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(listen_fd_.get(), reinterpret_cast<sockaddr*>(&a), sizeof a);
    socklen_t len = sizeof a;
    ::getsockname(listen_fd_.get(), reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    ::listen(listen_fd_.get(), 64);
    acceptor_ = std::thread([this] { accept_loop(); });
  }
  ~FakeRendezvous() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      closing_ = true;
      for (int fd : conns_) ::shutdown(fd, SHUT_RDWR);
    }
    cv_.notify_all();
    ::shutdown(listen_fd_.get(), SHUT_RDWR);
    acceptor_.join();
    for (auto& t : threads_) t.join();
  }
  int port() const { return port_; }

  // Round `round` begins with `size` ranks: registrations of other rounds get kStaleRound.
  void begin_round(int round, int size) {
    std::lock_guard<std::mutex> lk(mu_);
    round_ = round;
    size_ = size;
    table_.clear();
    cv_.notify_all();
  }
  void set(const std::string& key, const std::string& value) {
    std::lock_guard<std::mutex> lk(mu_);
    kv_[key] = value;
    cv_.notify_all();
  }
  int stale_answers() const {
    std::lock_guard<std::mutex> lk(mu_);
    return stale_;
  }
  // Waits (at most 60 s) until `n` registrations in all have been answered with their
  // neighbours; whether they were.
  bool wait_registered(int n) {
    std::unique_lock<std::mutex> lk(mu_);
    return cv_.wait_for(lk, std::chrono::seconds(60), [&] { return registered_ >= n; });
  }

 private:
  using Clock = std::chrono::steady_clock;
  static Clock::time_point in_s(double s) {
    return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
  }

  void accept_loop() {
    for (;;) {
      int fd = ::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) return;
      std::lock_guard<std::mutex> lk(mu_);
      if (closing_) {
        ::close(fd);
        return;
      }
      conns_.push_back(fd);
      threads_.emplace_back([this, fd] {
        serve(fd);
        std::lock_guard<std::mutex> g(mu_);
        for (auto& c : conns_)
          if (c == fd) c = -1;
        ::close(fd);
      });
    }
  }

  static bool read_frame(int fd, Frame* f) {
    char header[kHeaderBytes];
    if (!read_exact(fd, header, sizeof header, in_s(600))) return false;
    auto len = decode_length(header, kMaxFrame);
    if (!len) return false;
    std::string body(*len, '\0');
    if (!read_exact(fd, body.data(), body.size(), in_s(600))) return false;
    auto d = decode_body(body);
    if (!d) return false;
    *f = std::move(*d);
    return true;
  }
  static bool send(int fd, MsgType t, const std::string& payload) {
    std::string frame = encode_frame(t, payload);
    return write_exact(fd, frame.data(), frame.size(), in_s(60)).ok();
  }

  bool authenticate(int fd) {
    Frame hello, auth;
    if (!read_frame(fd, &hello) || hello.type != MsgType::kHello) return false;
    std::string nonce = random_bytes(kNonceBytes);
    if (!send(fd, MsgType::kChallenge, nonce + server_proof(secret_, hello.payload, nonce))) return false;
    if (!read_frame(fd, &auth) || auth.type != MsgType::kAuth) return false;
    return constant_time_equal(auth.payload, client_proof(secret_, nonce, hello.payload));
  }

  void serve(int fd) {
    if (!authenticate(fd)) return;
    Frame f;
    while (read_frame(fd, &f)) {
      bool ok = true;
      switch (f.type) {
        case MsgType::kRegister: ok = on_register(fd, f); break;
        case MsgType::kSet: {
          auto kv = decode_key_value(f.payload);
          if (kv) set(kv->first, kv->second);
          ok = send(fd, MsgType::kOk, "");
          break;
        }
        case MsgType::kGet: ok = on_get(fd, f); break;
        case MsgType::kWait: ok = on_wait(fd, f); break;
        case MsgType::kFatal: ok = send(fd, MsgType::kOk, ""); break;
        default: ok = send(fd, MsgType::kError, encode_string("the fake serves no such request"));
      }
      if (!ok) return;
    }
  }

  bool on_get(int fd, const Frame& f) {
    auto key = decode_string(f.payload);
    std::unique_lock<std::mutex> lk(mu_);
    auto it = key ? kv_.find(*key) : kv_.end();
    if (it == kv_.end()) {
      lk.unlock();
      return send(fd, MsgType::kNotFound, "");
    }
    std::string v = it->second;
    lk.unlock();
    return send(fd, MsgType::kValue, encode_string(v));
  }

  bool on_wait(int fd, const Frame& f) {
    auto w = decode_wait(f.payload);
    if (!w) return false;
    std::vector<std::string> missing;
    std::unique_lock<std::mutex> lk(mu_);
    auto all_there = [&] {
      missing.clear();
      for (const auto& k : w->second)
        if (!kv_.count(k)) missing.push_back(k);
      return missing.empty() || closing_;
    };
    cv_.wait_for(lk, std::chrono::milliseconds(w->first), all_there);
    lk.unlock();
    if (missing.empty()) return send(fd, MsgType::kOk, "");
    return send(fd, MsgType::kTimeout, encode_keys(missing));
  }

  // Waits (bounded) until the round's table is full or the round moves on.
  bool on_register(int fd, const Frame& f) {
    auto q = decode_register(f.payload);
    if (!q) return false;
    std::unique_lock<std::mutex> lk(mu_);
    const int round = round_;
    if (q->round != round) {
      ++stale_;
      lk.unlock();
      return send(fd, MsgType::kStaleRound, encode_i64(round));
    }
    table_[q->rank] = PeerInfo{q->rank, q->host, q->addr, q->port};
    cv_.notify_all();
    cv_.wait_for(lk, std::chrono::seconds(60),
                 [&] { return closing_ || round_ != round || static_cast<int>(table_.size()) == size_; });
    if (round_ != round) {
      ++stale_;
      int now = round_;
      lk.unlock();
      return send(fd, MsgType::kStaleRound, encode_i64(now));
    }
    if (static_cast<int>(table_.size()) != size_) return false;
    Registered r{size_, table_[(q->rank + size_ - 1) % size_], table_[(q->rank + 1) % size_]};
    lk.unlock();
    bool sent = send(fd, MsgType::kRegistered, encode_registered(r));
    lk.lock();
    ++registered_;
    cv_.notify_all();
    return sent;
  }

  std::string secret_;
  UniqueFd listen_fd_;
  int port_ = 0;
  std::thread acceptor_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool closing_ = false;
  std::vector<int> conns_;
  std::vector<std::thread> threads_;
  std::map<std::string, std::string> kv_;
  int round_ = 1, size_ = 1, stale_ = 0, registered_ = 0;
  std::map<int, PeerInfo> table_;
};

}  // namespace hvdrun::rdv
