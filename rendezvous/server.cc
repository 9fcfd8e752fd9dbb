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
#include "common/log_limiter.h"
#include "common/strings.h"
#include "rendezvous/auth.h"
#include "rendezvous/horovod_http.h"
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

// A session stops reading requests while this much of its answers is unsent (a client that
// pipelines gets and never reads cannot grow hvdrun).
constexpr size_t kMaxOutboxBytes = 8u << 20;
// A session's read buffer goes back to this size after a large frame.
constexpr size_t kInbufBytes = 8192;
// What a fatal message may bring to hvdrun's terminal.
constexpr size_t kMaxFatalMessage = 4096;

// Accepting again after EMFILE/ENFILE (and ENOBUFS/ENOMEM): from 10 ms, doubling, to 1 s.
constexpr auto kAcceptBackoffMin = std::chrono::milliseconds(10);
constexpr auto kAcceptBackoffMax = std::chrono::milliseconds(1000);

std::string quoted(std::string_view s) { return "'" + printable(s, 64) + "'"; }

// The value of counter `key`: decimal text written by add/barrier.
Result<int64_t> counter_value(const std::string& key, const std::string& text) {
  auto v = parse_int(text, "counter", INT64_MIN, INT64_MAX);
  if (!v) return make_error(ErrorKind::kInvalidArgument,
                            "key " + quoted(key) + " holds " + quoted(text) + ", not a 64-bit integer");
  return static_cast<int64_t>(*v);
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
  // Registrations per rank: a rank that called hvd_shutdown and hvd_init again registers
  // once more (its earlier connection closed); round k completes when every rank has
  // registered k times, and its sessions then get their neighbours.
  std::vector<int> reg_count;
  std::vector<std::weak_ptr<Session>> owner;
  std::unordered_map<std::string, std::string> kv;
  std::unordered_multimap<std::string, std::shared_ptr<Waiter>> waiters;
  std::set<std::shared_ptr<Session>> sessions;

  size_t store_bytes = 0;  // keys + values + kStoreEntryOverhead each
  LogLimiter log_limiter;
  asio::steady_timer log_flush_timer{io};
  asio::steady_timer accept_backoff{io};
  std::chrono::milliseconds accept_delay{0};

  // hvdrun --horovod (after `io`: destroyed before it).
  std::unique_ptr<HorovodHttpServer> horovod;

  std::atomic<int> registered{0};
  std::atomic<int> rejected{0};
  std::atomic<int> open_waits{0};  // waits and barriers not answered yet

  void accept();
  void on_accept_error(const boost::system::error_code& ec);
  void arm_log_flush();
  // A warning, rate-limited per kind (the message without the peer).
  void warn(const std::string& kind, const std::string& line) {
    // Keys and host names come from workers: their bytes never reach the terminal raw.
    log_limiter.log(printable(kind, 256, true), printable(line, 1024, true), LogLimiter::Clock::now(),
                    [](const std::string& l) { spdlog::warn("rendezvous: {}", l); });
  }
  // Stores key = value within the store's bounds; an error names the bound.
  Status store(const std::string& key, std::string value);
  void on_registered();
  void on_reregistered(int round);
  void arm_start_timer();
  void on_start_timer();
  bool complete() const { return registered == static_cast<int>(peers.size()); }
  void notify_key(const std::string& key);
  void drop_waiter(const std::shared_ptr<Waiter>& w);
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
    boost::system::error_code ec;
    sock_.set_option(tcp::no_delay(true), ec);  // a connection already reset fails later, alone
    deadline_.expires_after(seconds_to_duration(srv_.opts.handshake_timeout));
    deadline_.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
      if (!ec && self->state_ != State::kReady) self->reject("no authentication within the handshake time-out");
    });
    read_more();
  }

  void waits_done(size_t n = 1) { pending_waits_ -= std::min(pending_waits_, n); }

  void send(MsgType type, std::string_view payload) {
    if (closed_) return;
    bool idle = outbox_.empty();
    outbox_.push_back(encode_frame(type, payload));
    outbox_bytes_ += outbox_.back().size();
    if (idle) write_next();
  }

  // Sends an error frame, then closes once it is written.
  void fail(const std::string& message) {
    srv_.warn("closing a connection: " + message,
              peer_ + (rank_ >= 0 ? " (rank " + std::to_string(rank_) + ")" : "") + ": " + message +
                  "; closing the connection");
    closing_ = true;
    send(MsgType::kError, encode_string(message));
  }

  void close() {
    if (closed_) return;
    closed_ = true;
    // Its waits end with it: nothing of a closed connection stays in the server.
    for (auto& weak : waits_) {
      auto w = weak.lock();
      if (!w || w->done) continue;
      w->done = true;
      srv_.open_waits--;
      if (w->timer) w->timer->cancel();
      srv_.drop_waiter(w);
    }
    waits_.clear();
    boost::system::error_code ec;
    deadline_.cancel();
    sock_.shutdown(tcp::socket::shutdown_both, ec);
    sock_.close(ec);
    srv_.sessions.erase(shared_from_this());
  }

  bool closed() const { return closed_; }
  int rank() const { return rank_; }
  int round() const { return round_; }

 private:
  enum class State { kHello, kAuth, kReady };

  // Refuses an unauthenticated or misbehaving connection: counted, logged, closed at once.
  void reject(const std::string& why) {
    if (closed_) return;
    srv_.rejected++;
    srv_.warn("refused connection: " + why, "refused connection from " + peer_ + ": " + why);
    close();
  }

  // Reads whatever has arrived into inbuf_ and handles every complete frame in it: one
  // read for several frames, and for a frame's header and body together.
  void read_more() {
    if (inbuf_.size() - inlen_ < 4096) inbuf_.resize(std::max<size_t>(inbuf_.size() * 2, kInbufBytes));
    sock_.async_read_some(asio::buffer(inbuf_.data() + inlen_, inbuf_.size() - inlen_),
                          [self = shared_from_this()](auto ec, size_t n) {
                            if (ec) return self->on_eof();
                            self->inlen_ += n;
                            self->pump();
                          });
  }

  // Handles the frames read so far, then reads more, unless the answers pile up unsent
  // (then write_next() resumes once they are written).
  void pump() {
    if (!parse_frames()) return;
    if (backlogged()) {
      read_paused_ = true;
      return;
    }
    read_more();
  }

  bool backlogged() const { return outbox_bytes_ > kMaxOutboxBytes; }

  // Returns true to keep reading.
  bool parse_frames() {
    size_t pos = 0;
    while (!closing_ && !closed_ && !backlogged() && inlen_ - pos >= kHeaderBytes) {
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
    if (inbuf_.size() > 4 * kInbufBytes && inlen_ < kInbufBytes) {  // after a large frame
      inbuf_.resize(kInbufBytes);
      inbuf_.shrink_to_fit();
    }
    return !closing_ && !closed_;
  }

  void on_eof() {
    if (rank_ >= 0) spdlog::debug("rendezvous: rank {} disconnected", rank_);
    if (rank_ >= 0 && !finalized_ && srv_.cbs.on_rank_left) srv_.cbs.on_rank_left(rank_);
    finalized_ = true;  // reported once
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
          srv_.warn("refused connection: authentication failed",
                    "refused connection from " + peer_ + ": authentication failed");
          closing_ = true;
          send(MsgType::kAuthFailed, encode_string("authentication failed"));
          return false;
        }
        // Success is silent: the reply to the first request says it (one message less).
        state_ = State::kReady;
        deadline_.cancel();
        return true;
      }
      case State::kReady:
        // No request stops the server: anything unexpected is this connection's error.
        try {
          return request(f);
        } catch (const std::exception& e) {
          fail(std::string(msg_type_name(f.type)) + " request failed: " + e.what());
          return false;
        }
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
        if (q->port < 1 || q->port > 65535)
          return fail("rank " + std::to_string(q->rank) + " registered data port " + std::to_string(q->port) +
                      "; expected 1 to 65535"),
                 false;
        if (s.peers[q->rank].rank >= 0) {
          auto prev = s.owner[q->rank].lock();
          if (prev && !prev->closed())
            return fail("rank " + std::to_string(q->rank) + " is already registered (from host " +
                        s.peers[q->rank].host + ")"),
                   false;
        }
        rank_ = q->rank;
        round_ = ++s.reg_count[rank_];
        s.owner[rank_] = shared_from_this();
        s.peers[rank_] = PeerInfo{q->rank, q->host, q->addr, q->port};
        s.pending_register.push_back(shared_from_this());
        if (round_ == 1) s.on_registered();
        else s.on_reregistered(round_);
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
        if (kv->first.rfind(kStallKeyPrefix, 0) == 0 && s.cbs.on_stall) s.cbs.on_stall(rank_, kv->first, kv->second);
        if (rank_ >= 0 && kv->first == kFinalizedKeyPrefix + std::to_string(rank_)) finalized_ = true;
        if (rank_ >= 0 && kv->first == kSilentKeyPrefix + std::to_string(rank_) && s.cbs.on_silent) {
          // A value that names no rank is stored but not acted on.
          if (auto peer = parse_int(kv->second, "silent peer", 0, static_cast<long long>(s.peers.size()) - 1))
            s.cbs.on_silent(rank_, static_cast<int>(*peer));
        }
        if (rank_ >= 0 && kv->first == kLostKeyPrefix + std::to_string(rank_) && s.cbs.on_lost) {
          if (auto peer = parse_int(kv->second, "lost peer", 0, static_cast<long long>(s.peers.size()) - 1))
            s.cbs.on_lost(rank_, static_cast<int>(*peer));
        }
        if (auto st = s.store(kv->first, std::move(kv->second)); !st) return fail(st.error().message), false;
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
          auto cur = counter_value(a->first, it->second);
          if (!cur) return fail("add: " + cur.error().message), false;
          v = *cur;
        }
        if (__builtin_add_overflow(v, a->second, &v))
          return fail("add " + std::to_string(a->second) + " to key " + quoted(a->first) +
                      ": the sum leaves the 64-bit integer range"),
                 false;
        if (auto st = s.store(a->first, std::to_string(v)); !st) return fail(st.error().message), false;
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
        int64_t v = 0;
        if (auto it = s.kv.find(count_key); it != s.kv.end()) {
          auto cur = counter_value(count_key, it->second);
          if (!cur) return fail("barrier " + quoted(b->name) + ": " + cur.error().message), false;
          v = *cur;
        }
        if (__builtin_add_overflow(v, 1, &v))
          return fail("barrier " + quoted(b->name) + ": its count leaves the 64-bit integer range"), false;
        if (auto st = s.store(count_key, std::to_string(v)); !st) return fail(st.error().message), false;
        if (v >= b->parties) {
          if (auto st = s.store(done_key, "1"); !st) return fail(st.error().message), false;
          send(MsgType::kOk, "");
          s.notify_key(done_key);
          return true;
        }
        return park({done_key}, b->timeout_ms);
      }
      case MsgType::kFatal: {
        auto m = decode_string(f.payload);
        if (!m) return fail(m.error().message), false;
        if (m->size() > kMaxFatalMessage)
          *m = m->substr(0, kMaxFatalMessage) + "... (" + std::to_string(m->size() - kMaxFatalMessage) +
               " bytes more)";
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
    if (pending_waits_ >= kMaxPendingWaits)
      return fail("more than " + std::to_string(kMaxPendingWaits) + " waits at once on one connection"), false;
    ++pending_waits_;
    std::erase_if(waits_, [](const std::weak_ptr<Waiter>& w) {
      auto p = w.lock();
      return !p || p->done;
    });
    waits_.push_back(waiter);
    s.open_waits++;
    for (const auto& k : waiter->missing) s.waiters.emplace(k, waiter);
    waiter->timer = std::make_unique<asio::steady_timer>(s.io, std::chrono::milliseconds(timeout_ms));
    waiter->timer->async_wait([waiter, &s](const boost::system::error_code& ec) {
      if (ec || waiter->done) return;
      waiter->done = true;
      s.open_waits--;
      waiter->session->waits_done();
      s.drop_waiter(waiter);
      if (!waiter->session->closed())
        waiter->session->send(MsgType::kTimeout,
                              encode_keys(std::vector<std::string>(waiter->missing.begin(), waiter->missing.end())));
    });
    return true;
  }

  void write_next() {
    asio::async_write(sock_, asio::buffer(outbox_.front()), [self = shared_from_this()](auto ec, size_t) {
      if (ec) return self->close();
      self->outbox_bytes_ -= self->outbox_.front().size();
      self->outbox_.pop_front();
      if (!self->outbox_.empty()) {
        self->write_next();
      } else if (self->closing_) {
        return self->close();
      }
      if (self->read_paused_ && !self->backlogged() && !self->closing_ && !self->closed_) {
        self->read_paused_ = false;
        self->pump();
      }
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
  size_t outbox_bytes_ = 0;
  size_t pending_waits_ = 0;
  std::vector<std::weak_ptr<Waiter>> waits_;  // this connection's waits and barriers
  bool read_paused_ = false;
  bool closing_ = false, closed_ = false;
  int rank_ = -1;
  int round_ = 0;
  bool finalized_ = false;  // this rank said it is done (hvd_shutdown)
};

void Server::Impl::accept() {
  acceptor.async_accept([this](const boost::system::error_code& ec, tcp::socket sock) {
    if (ec == asio::error::operation_aborted) return;
    if (ec) return on_accept_error(ec);
    accept_delay = std::chrono::milliseconds(0);
    ::fcntl(sock.native_handle(), F_SETFD, FD_CLOEXEC);
    auto s = std::make_shared<Session>(*this, std::move(sock));
    sessions.insert(s);
    s->start();
    accept();
  });
}

// Out of descriptors or memory, the connection waits in the backlog and accepting at once
// would fail again at once (a spinning thread): wait, longer each time, up to a second.
void Server::Impl::on_accept_error(const boost::system::error_code& ec) {
  int e = ec.value();
  bool exhausted = ec.category() == boost::system::system_category() &&
                   (e == EMFILE || e == ENFILE || e == ENOBUFS || e == ENOMEM);
  warn("cannot accept a connection: " + ec.message(),
       "cannot accept a connection: " + ec.message() +
           (exhausted ? "; accepting again after a pause" : ""));
  if (!exhausted) return accept();  // ECONNABORTED and the like: that connection is gone
  accept_delay = std::clamp(accept_delay * 2, kAcceptBackoffMin, kAcceptBackoffMax);
  accept_backoff.expires_after(accept_delay);
  accept_backoff.async_wait([this](const boost::system::error_code& tec) {
    if (!tec) accept();
  });
}

void Server::Impl::arm_log_flush() {
  log_flush_timer.expires_after(std::chrono::seconds(1));
  log_flush_timer.async_wait([this](const boost::system::error_code& ec) {
    if (ec) return;
    log_limiter.flush(LogLimiter::Clock::now(), [](const std::string& l) { spdlog::warn("rendezvous: {}", l); });
    arm_log_flush();
  });
}

Status Server::Impl::store(const std::string& key, std::string value) {
  if (value.size() > kMaxValueBytes)
    return make_error(ErrorKind::kInvalidArgument,
                      "value of " + std::to_string(value.size()) + " bytes for key " + quoted(key) +
                          " exceeds the limit of " + std::to_string(kMaxValueBytes) + " bytes");
  auto it = kv.find(key);
  size_t old = it == kv.end() ? 0 : key.size() + it->second.size() + kStoreEntryOverhead;
  size_t now = store_bytes - old + key.size() + value.size() + kStoreEntryOverhead;
  if (now > kMaxStoreBytes)
    return make_error(ErrorKind::kInvalidArgument,
                      "setting key " + quoted(key) + " would grow the job's key-value store to " +
                          std::to_string(now) + " bytes, over its limit of " + std::to_string(kMaxStoreBytes) + " bytes");
  store_bytes = now;
  if (it == kv.end())
    kv.emplace(key, std::move(value));
  else
    it->second = std::move(value);
  return {};
}

void Server::Impl::drop_waiter(const std::shared_ptr<Waiter>& w) {
  for (const auto& k : w->missing) {
    auto range = waiters.equal_range(k);
    for (auto it = range.first; it != range.second;) it = it->second == w ? waiters.erase(it) : std::next(it);
  }
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

// A later round (hvd_init after hvd_shutdown): complete when every rank registered again.
void Server::Impl::on_reregistered(int round) {
  for (int c : reg_count)
    if (c < round) return;
  int size = static_cast<int>(peers.size());
  std::vector<std::shared_ptr<Session>> keep;
  for (auto& sess : pending_register) {
    if (sess->closed()) continue;
    if (sess->round() != round) {
      keep.push_back(sess);
      continue;
    }
    int r = sess->rank();
    Registered g{size, peers[(r - 1 + size) % size], peers[(r + 1) % size]};
    sess->send(MsgType::kRegistered, encode_registered(g));
  }
  pending_register.swap(keep);
  spdlog::debug("rendezvous: all {} ranks registered again (round {})", size, round);
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
    open_waits--;
    w->timer->cancel();
    w->session->waits_done();
    if (!w->session->closed()) w->session->send(MsgType::kOk, "");
  }
}

Server::Server(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Result<std::unique_ptr<Server>> Server::start(ServerOptions options, ServerCallbacks callbacks) {
  auto impl = std::make_unique<Impl>();
  impl->opts = std::move(options);
  impl->cbs = std::move(callbacks);
  impl->peers.assign(impl->opts.ranks.size(), PeerInfo{});
  impl->reg_count.assign(impl->opts.ranks.size(), 0);
  impl->owner.assign(impl->opts.ranks.size(), {});
  boost::system::error_code ec;
  auto addr = asio::ip::make_address(impl->opts.bind_address, ec);
  if (ec) return make_error(ErrorKind::kInvalidArgument,
                            "rendezvous: bad listen address '" + impl->opts.bind_address + "'");
  tcp::endpoint ep(addr, static_cast<unsigned short>(impl->opts.port));
  impl->acceptor.open(ep.protocol(), ec);
  if (!ec) impl->acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) impl->acceptor.bind(ep, ec);
  if (!ec) impl->acceptor.listen(65535, ec);
  if (ec)
    return make_error(ErrorKind::kLaunchFailed, "rendezvous: cannot listen on " + impl->opts.bind_address + ":" +
                                                     std::to_string(impl->opts.port) + ": " + ec.message());
  ::fcntl(impl->acceptor.native_handle(), F_SETFD, FD_CLOEXEC);
  if (impl->opts.horovod.enabled) {
    const HorovodServing& hs = impl->opts.horovod;
    auto allowed = PeerAllowList::from(hs.allowed_peers, hs.allow_loopback);
    if (!allowed) return wrap(allowed.error(), "rendezvous");
    std::vector<std::string> hosts;
    std::vector<int> local_ranks;
    for (const auto& r : impl->opts.ranks) {
      hosts.push_back(r.host);
      local_ranks.push_back(r.local_rank);
    }
    HorovodHttpOptions ho;
    ho.bind_address = impl->opts.bind_address;
    ho.allowed = std::move(*allowed);
    ho.scope_sizes = horovod_scope_sizes(hosts, local_ranks);
    ho.limits = hs.limits;
    ho.header_timeout = hs.header_timeout;
    ho.request_timeout = hs.request_timeout;
    ho.max_connections = hs.max_connections;
    ho.max_reading_per_peer = hs.max_reading_per_peer;
    Impl* p = impl.get();
    auto h = HorovodHttpServer::listen(impl->io, std::move(ho), [p](const std::string& kind, const std::string& line) {
      p->warn(kind, line);
    });
    if (!h) return h.error();
    impl->horovod = std::move(*h);
  }
  impl->address = impl->opts.bind_address;
  impl->port = impl->acceptor.local_endpoint().port();
  impl->accept();
  impl->arm_log_flush();
  Impl* p = impl.get();
  impl->thread = std::thread([p] {
    // A handler that throws loses its own work, never the server: run on.
    while (true) {
      try {
        p->io.run();
        return;
      } catch (const std::exception& e) {
        spdlog::error("rendezvous: internal error (the server goes on): {}", e.what());
      }
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
  impl_->log_limiter.flush(LogLimiter::Clock::now(), [](const std::string& l) { spdlog::warn("rendezvous: {}", l); },
                           true);
  // Break the session <-> waiter cycles.
  impl_->waiters.clear();
  impl_->pending_register.clear();
  impl_->sessions.clear();
}

const std::string& Server::address() const { return impl_->address; }
int Server::port() const { return impl_->port; }
int Server::horovod_port() const { return impl_->horovod ? impl_->horovod->port() : 0; }
int Server::horovod_refused() const { return impl_->horovod ? impl_->horovod->refused() : 0; }
int Server::registered() const { return impl_->registered; }
int Server::rejected() const { return impl_->rejected; }
int Server::waiting() const { return impl_->open_waits; }

}  // namespace hvdrun::rdv
