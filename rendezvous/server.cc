#include "rendezvous/server.h"

#include <fcntl.h>

#include <atomic>
#include <boost/asio.hpp>
#include <cstring>
#include <deque>
#include <map>
#include <set>
#include <spdlog/spdlog.h>
#include <thread>
#include <unordered_map>

#include "common/deadline.h"
#include "common/strings.h"
#include "rendezvous/auth.h"
#include "rendezvous/protocol.h"

namespace hvdrun::rdv {

namespace asio = boost::asio;
using asio::ip::tcp;

namespace {

std::string fmt_seconds(double s) {
  char buf[32];
  snprintf(buf, sizeof buf, "%g", s);
  return buf;
}

}  // namespace

std::string start_timeout_message(const std::vector<int>& missing, const std::vector<ExpectedRank>& ranks,
                                  const std::string& endpoint, double timeout, size_t max_listed) {
  std::string msg;
  for (size_t i = 0; i < missing.size() && i < max_listed; ++i) {
    int r = missing[i];
    if (!msg.empty()) msg += "\n";
    msg += "hvdrun: rank " + std::to_string(r) + " (host " + ranks[r].host + ", local rank " +
           std::to_string(ranks[r].local_rank) + ") did not reach the rendezvous at " + endpoint + " within " +
           fmt_seconds(timeout) + " s";
  }
  if (missing.size() > max_listed)
    msg += "\nhvdrun: ... and " + std::to_string(missing.size() - max_listed) + " more ranks did not reach it";
  return msg;
}

class Session;

struct Waiter {
  std::shared_ptr<Session> session;
  std::set<std::string> missing;
  std::unique_ptr<asio::steady_timer> timer;
  bool done = false;
};

struct Server::Impl {
  ServerOptions opts;
  ServerCallbacks cbs;
  asio::io_context io;
  tcp::acceptor acceptor{io};
  asio::steady_timer start_timer{io};
  bool start_timer_idle = false;
  std::string address;
  int port = 0;
  std::thread thread;

  // Job state (io thread only).
  std::vector<PeerInfo> peers;            // index = rank; rank == -1 until registered
  std::vector<std::shared_ptr<Session>> pending_register;
  std::unordered_map<std::string, std::string> kv;
  std::unordered_multimap<std::string, std::shared_ptr<Waiter>> waiters;
  std::set<std::shared_ptr<Session>> sessions;

  std::atomic<int> registered{0};
  std::atomic<int> rejected{0};

  void accept();
  void on_registered();
  void arm_start_timer();
  void on_start_timer();
  bool complete() const { return registered == static_cast<int>(peers.size()); }
  void notify_key(const std::string& key);
  std::string endpoint() const { return address + ":" + std::to_string(port); }
};

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(Server::Impl& srv, tcp::socket sock) : srv_(srv), sock_(std::move(sock)), deadline_(srv.io) {
    boost::system::error_code ec;
    auto ep = sock_.remote_endpoint(ec);
    peer_ = ec ? std::string("?") : ep.address().to_string() + ":" + std::to_string(ep.port());
  }

  void start() {
    sock_.set_option(tcp::no_delay(true));
    deadline_.expires_after(seconds_to_duration(srv_.opts.handshake_timeout));
    deadline_.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
      if (!ec && self->state_ != State::kReady) self->reject("no authentication within the handshake time-out");
    });
    read_more();
  }

  void send(MsgType type, std::string_view payload) {
    bool idle = outbox_.empty();
    outbox_.push_back(encode_frame(type, payload));
    if (idle) write_next();
  }

  // Sends an error frame, then closes once it is written.
  void fail(const std::string& message) {
    spdlog::warn("rendezvous: {}{}: {}; closing the connection", peer_,
                 rank_ >= 0 ? " (rank " + std::to_string(rank_) + ")" : "", message);
    closing_ = true;
    send(MsgType::kError, encode_string(message));
  }

  void close() {
    if (closed_) return;
    closed_ = true;
    boost::system::error_code ec;
    deadline_.cancel();
    sock_.shutdown(tcp::socket::shutdown_both, ec);
    sock_.close(ec);
    srv_.sessions.erase(shared_from_this());
  }

  bool closed() const { return closed_; }
  int rank() const { return rank_; }

 private:
  enum class State { kHello, kAuth, kReady };

  // Refuses an unauthenticated or misbehaving connection: counted, logged, closed at once.
  void reject(const std::string& why) {
    if (closed_) return;
    srv_.rejected++;
    spdlog::warn("rendezvous: refused connection from {}: {}", peer_, why);
    close();
  }

  // Reads whatever has arrived into inbuf_ and handles every complete frame in it: one
  // read for several frames, and for a frame's header and body together.
  void read_more() {
    if (inbuf_.size() - inlen_ < 4096) inbuf_.resize(std::max<size_t>(inbuf_.size() * 2, 8192));
    sock_.async_read_some(asio::buffer(inbuf_.data() + inlen_, inbuf_.size() - inlen_),
                          [self = shared_from_this()](auto ec, size_t n) {
                            if (ec) return self->on_eof();
                            self->inlen_ += n;
                            if (self->parse_frames()) self->read_more();
                          });
  }

  // Returns true to keep reading.
  bool parse_frames() {
    size_t pos = 0;
    while (!closing_ && !closed_ && inlen_ - pos >= kHeaderBytes) {
      size_t max = state_ == State::kReady ? kMaxFrame : kMaxFrameBeforeAuth;
      auto len = decode_length(inbuf_.data() + pos, max);
      if (!len) {
        protocol_error(len.error().message);
        return false;
      }
      if (inlen_ - pos < kHeaderBytes + *len) {
        if (inbuf_.size() < kHeaderBytes + *len) inbuf_.resize(kHeaderBytes + *len + 4096);
        break;
      }
      auto frame = decode_body(std::string_view(inbuf_.data() + pos + kHeaderBytes, *len));
      pos += kHeaderBytes + *len;
      if (!frame) {
        protocol_error(frame.error().message);
        return false;
      }
      if (!handle(*frame)) return false;
    }
    std::memmove(inbuf_.data(), inbuf_.data() + pos, inlen_ - pos);
    inlen_ -= pos;
    return !closing_ && !closed_;
  }

  void on_eof() {
    if (rank_ >= 0) spdlog::debug("rendezvous: rank {} disconnected", rank_);
    close();
  }

  void protocol_error(const std::string& message) {
    if (state_ != State::kReady) return reject(message);
    srv_.rejected++;
    fail(message);
  }

  // Returns true to keep reading.
  bool handle(const Frame& f) {
    switch (state_) {
      case State::kHello: {
        if (f.type != MsgType::kHello || f.payload.size() != kNonceBytes) {
          reject(std::string("expected hello, got ") + msg_type_name(f.type));
          return false;
        }
        client_nonce_ = f.payload;
        server_nonce_ = random_bytes(kNonceBytes);
        send(MsgType::kChallenge, server_nonce_ + server_proof(srv_.opts.secret, client_nonce_, server_nonce_));
        state_ = State::kAuth;
        return true;
      }
      case State::kAuth: {
        std::string expected = client_proof(srv_.opts.secret, server_nonce_, client_nonce_);
        if (f.type != MsgType::kAuth || !constant_time_equal(f.payload, expected)) {
          srv_.rejected++;
          spdlog::warn("rendezvous: refused connection from {}: authentication failed", peer_);
          closing_ = true;
          send(MsgType::kError, encode_string("authentication failed"));
          return false;
        }
        // Success is silent: the reply to the first request says it (one message less).
        state_ = State::kReady;
        deadline_.cancel();
        return true;
      }
      case State::kReady:
        return request(f);
    }
    return false;
  }

  bool request(const Frame& f) {
    auto& s = srv_;
    switch (f.type) {
      case MsgType::kRegister: {
        auto q = decode_register(f.payload);
        if (!q) return fail(q.error().message), false;
        int size = static_cast<int>(s.peers.size());
        if (q->size != size)
          return fail("rank " + std::to_string(q->rank) + " says the job has " + std::to_string(q->size) +
                      " ranks; hvdrun started " + std::to_string(size)),
                 false;
        if (q->rank < 0 || q->rank >= size)
          return fail("rank " + std::to_string(q->rank) + " is out of range (job size " + std::to_string(size) + ")"),
                 false;
        if (rank_ >= 0) return fail("this connection already registered rank " + std::to_string(rank_)), false;
        if (s.peers[q->rank].rank >= 0)
          return fail("rank " + std::to_string(q->rank) + " is already registered (from host " +
                      s.peers[q->rank].host + ")"),
                 false;
        rank_ = q->rank;
        s.peers[rank_] = PeerInfo{q->rank, q->host, q->addr, q->port};
        s.pending_register.push_back(shared_from_this());
        s.on_registered();
        return true;
      }
      case MsgType::kGetPeer: {
        auto r = decode_i64(f.payload);
        if (!r) return fail(r.error().message), false;
        if (*r < 0 || *r >= static_cast<int64_t>(s.peers.size()) || s.peers[*r].rank < 0)
          send(MsgType::kNotFound, "");
        else
          send(MsgType::kPeer, encode_peer(s.peers[*r]));
        return true;
      }
      case MsgType::kSet: {
        auto kv = decode_key_value(f.payload);
        if (!kv) return fail(kv.error().message), false;
        s.kv[kv->first] = std::move(kv->second);
        send(MsgType::kOk, "");
        s.notify_key(kv->first);
        return true;
      }
      case MsgType::kGet: {
        auto key = decode_string(f.payload);
        if (!key) return fail(key.error().message), false;
        auto it = s.kv.find(*key);
        if (it == s.kv.end())
          send(MsgType::kNotFound, "");
        else
          send(MsgType::kValue, encode_string(it->second));
        return true;
      }
      case MsgType::kAdd: {
        auto a = decode_add(f.payload);
        if (!a) return fail(a.error().message), false;
        int64_t v = 0;
        auto it = s.kv.find(a->first);
        if (it != s.kv.end()) {
          auto cur = parse_int(it->second, "counter", INT64_MIN, INT64_MAX);
          if (!cur) return fail("add to key '" + a->first + "', which does not hold an integer"), false;
          v = *cur;
        }
        v += a->second;
        s.kv[a->first] = std::to_string(v);
        send(MsgType::kCounter, encode_i64(v));
        s.notify_key(a->first);
        return true;
      }
      case MsgType::kWait: {
        auto w = decode_wait(f.payload);
        if (!w) return fail(w.error().message), false;
        return park(w->second, w->first);
      }
      case MsgType::kBarrier: {
        auto b = decode_barrier(f.payload);
        if (!b) return fail(b.error().message), false;
        std::string count_key = b->name + "/count", done_key = b->name + "/done";
        int64_t v = 1;
        if (auto it = s.kv.find(count_key); it != s.kv.end()) v += std::stoll(it->second);
        s.kv[count_key] = std::to_string(v);
        if (v >= b->parties) {
          s.kv[done_key] = "1";
          send(MsgType::kOk, "");
          s.notify_key(done_key);
          return true;
        }
        return park({done_key}, b->timeout_ms);
      }
      case MsgType::kFatal: {
        auto m = decode_string(f.payload);
        if (!m) return fail(m.error().message), false;
        if (s.cbs.on_fatal) s.cbs.on_fatal(rank_, *m);
        send(MsgType::kOk, "");
        return true;
      }
      default:
        fail(std::string("unexpected message ") + msg_type_name(f.type));
        return false;
    }
  }

  // Answers ok once every key exists, or timeout (with the missing keys) after `timeout_ms`.
  bool park(const std::vector<std::string>& keys, uint32_t timeout_ms) {
    auto& s = srv_;
    auto waiter = std::make_shared<Waiter>();
    waiter->session = shared_from_this();
    for (auto& k : keys)
      if (!s.kv.count(k)) waiter->missing.insert(k);
    if (waiter->missing.empty()) {
      send(MsgType::kOk, "");
      return true;
    }
    for (const auto& k : waiter->missing) s.waiters.emplace(k, waiter);
    waiter->timer = std::make_unique<asio::steady_timer>(s.io, std::chrono::milliseconds(timeout_ms));
    waiter->timer->async_wait([waiter](const boost::system::error_code& ec) {
      if (ec || waiter->done) return;
      waiter->done = true;
      if (!waiter->session->closed())
        waiter->session->send(MsgType::kTimeout,
                              encode_keys(std::vector<std::string>(waiter->missing.begin(), waiter->missing.end())));
    });
    return true;
  }

  void write_next() {
    asio::async_write(sock_, asio::buffer(outbox_.front()), [self = shared_from_this()](auto ec, size_t) {
      if (ec) return self->close();
      self->outbox_.pop_front();
      if (!self->outbox_.empty()) return self->write_next();
      if (self->closing_) self->close();
    });
  }

  Server::Impl& srv_;
  tcp::socket sock_;
  asio::steady_timer deadline_;
  std::string peer_;
  State state_ = State::kHello;
  std::vector<char> inbuf_;
  size_t inlen_ = 0;
  std::string client_nonce_, server_nonce_;
  std::deque<std::string> outbox_;
  bool closing_ = false, closed_ = false;
  int rank_ = -1;
};

void Server::Impl::accept() {
  acceptor.async_accept([this](const boost::system::error_code& ec, tcp::socket sock) {
    if (ec == asio::error::operation_aborted) return;
    if (!ec) {
      ::fcntl(sock.native_handle(), F_SETFD, FD_CLOEXEC);
      auto s = std::make_shared<Session>(*this, std::move(sock));
      sessions.insert(s);
      s->start();
    }
    accept();
  });
}

void Server::Impl::arm_start_timer() {
  start_timer.expires_after(seconds_to_duration(opts.start_timeout));
  start_timer.async_wait([this](const boost::system::error_code& ec) {
    if (!ec) on_start_timer();
  });
}

void Server::Impl::on_registered() {
  ++registered;
  if (start_timer_idle) {  // the first registration after an idle start timer re-arms it
    start_timer_idle = false;
    arm_start_timer();
  }
  if (!complete()) return;
  int size = static_cast<int>(peers.size());
  start_timer.cancel();
  for (auto& sess : pending_register) {
    if (sess->closed()) continue;
    int r = sess->rank();
    Registered g{size, peers[(r - 1 + size) % size], peers[(r + 1) % size]};
    sess->send(MsgType::kRegistered, encode_registered(g));
  }
  pending_register.clear();
  pending_register.shrink_to_fit();
  spdlog::debug("rendezvous: all {} ranks registered", size);
}

void Server::Impl::on_start_timer() {
  if (complete()) return;
  if (registered == 0) {
    // Nobody uses the rendezvous yet (a job without libhvdrun, or a slow start): the
    // clock starts again at the first registration.
    start_timer_idle = true;
    return;
  }
  std::vector<int> missing;
  for (size_t r = 0; r < peers.size(); ++r)
    if (peers[r].rank < 0) missing.push_back(static_cast<int>(r));
  if (cbs.on_start_timeout) cbs.on_start_timeout(start_timeout_message(missing, opts.ranks, endpoint(), opts.start_timeout));
}

void Server::Impl::notify_key(const std::string& key) {
  auto range = waiters.equal_range(key);
  std::vector<std::shared_ptr<Waiter>> hit;
  for (auto it = range.first; it != range.second; ++it) hit.push_back(it->second);
  waiters.erase(range.first, range.second);
  for (auto& w : hit) {
    w->missing.erase(key);
    if (w->done || !w->missing.empty()) continue;
    w->done = true;
    w->timer->cancel();
    if (!w->session->closed()) w->session->send(MsgType::kOk, "");
  }
}

Server::Server(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Result<std::unique_ptr<Server>> Server::start(ServerOptions options, ServerCallbacks callbacks) {
  auto impl = std::make_unique<Impl>();
  impl->opts = std::move(options);
  impl->cbs = std::move(callbacks);
  impl->peers.assign(impl->opts.ranks.size(), PeerInfo{});
  boost::system::error_code ec;
  auto addr = asio::ip::make_address(impl->opts.bind_address, ec);
  if (ec) return make_error("rendezvous: bad listen address '" + impl->opts.bind_address + "'");
  tcp::endpoint ep(addr, static_cast<unsigned short>(impl->opts.port));
  impl->acceptor.open(ep.protocol(), ec);
  if (!ec) impl->acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) impl->acceptor.bind(ep, ec);
  if (!ec) impl->acceptor.listen(65535, ec);
  if (ec)
    return make_error("rendezvous: cannot listen on " + impl->opts.bind_address + ":" +
                          std::to_string(impl->opts.port) + ": " + ec.message(),
                      3);
  ::fcntl(impl->acceptor.native_handle(), F_SETFD, FD_CLOEXEC);
  impl->address = impl->opts.bind_address;
  impl->port = impl->acceptor.local_endpoint().port();
  impl->accept();
  Impl* p = impl.get();
  impl->thread = std::thread([p] {
    try {
      p->io.run();
    } catch (const std::exception& e) {
      spdlog::error("rendezvous: server stopped: {}", e.what());
    }
  });
  return std::unique_ptr<Server>(new Server(std::move(impl)));
}

void Server::begin_start_timer() {
  Impl* p = impl_.get();
  if (p->opts.start_timeout <= 0) return;
  asio::post(p->io, [p] { p->arm_start_timer(); });
}

Server::~Server() {
  impl_->io.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
  // Break the session <-> waiter cycles.
  impl_->waiters.clear();
  impl_->pending_register.clear();
  impl_->sessions.clear();
}

const std::string& Server::address() const { return impl_->address; }
int Server::port() const { return impl_->port; }
int Server::registered() const { return impl_->registered; }
int Server::rejected() const { return impl_->rejected; }

}  // namespace hvdrun::rdv
