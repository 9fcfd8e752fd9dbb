// One connection to the rendezvous server: the handshake, frames in and out, and one handler
// per request type (server_impl.h declares it).
#include <cstring>

#include "common/deadline.h"
#include "rendezvous/auth.h"
#include "rendezvous/server_impl.h"

namespace hvdrun::rdv {

namespace {

// The value of counter `key`: decimal text written by add/barrier.
Result<int64_t> counter_value(const std::string& key, const std::string& text) {
  auto v = parse_int(text, "counter", INT64_MIN, INT64_MAX);
  if (!v) return make_error(ErrorKind::kInvalidArgument,
                            "key " + quoted(key) + " holds " + quoted(text) + ", not a 64-bit integer");
  return static_cast<int64_t>(*v);
}

}  // namespace

void Session::start() {
  boost::system::error_code ec;
  sock_.set_option(tcp::no_delay(true), ec);  // a connection already reset fails later, alone
  deadline_.expires_after(seconds_to_duration(srv_.opts.handshake_timeout));
  deadline_.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
    if (!ec && self->state_ != State::kReady) self->reject("no authentication within the handshake time-out");
  });
  read_more();
}

void Session::send(MsgType type, std::string_view payload) {
  if (closed_) return;
  bool idle = outbox_.empty();
  outbox_.push_back(encode_frame(type, payload));
  outbox_bytes_ += outbox_.back().size();
  if (idle) write_next();
}

void Session::fail(const std::string& message) {
  srv_.warn("closing a connection: " + message,
            peer_ + (rank_ >= 0 ? " (rank " + std::to_string(rank_) + ")" : "") + ": " + message +
                "; closing the connection");
  closing_ = true;
  send(MsgType::kError, encode_string(message));
}

void Session::close() {
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

void Session::reject(const std::string& why) {
  if (closed_) return;
  srv_.rejected++;
  srv_.warn("refused connection: " + why, "refused connection from " + peer_ + ": " + why);
  close();
}

void Session::read_more() {
  if (inbuf_.size() - inlen_ < 4096) inbuf_.resize(std::max<size_t>(inbuf_.size() * 2, kInbufBytes));
  sock_.async_read_some(asio::buffer(inbuf_.data() + inlen_, inbuf_.size() - inlen_),
                        [self = shared_from_this()](auto ec, size_t n) {
                          if (ec) return self->on_eof();
                          self->inlen_ += n;
                          self->pump();
                        });
}

void Session::pump() {
  if (!parse_frames()) return;
  if (backlogged()) {
    read_paused_ = true;
    return;
  }
  read_more();
}

bool Session::parse_frames() {
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

void Session::on_eof() {
  if (rank_ >= 0) spdlog::debug("rendezvous: rank {} disconnected", rank_);
  if (current() && !finalized_ && srv_.cbs.on_rank_left) srv_.cbs.on_rank_left(rank_);
  finalized_ = true;  // reported once
  close();
}

void Session::protocol_error(const std::string& message) {
  if (state_ != State::kReady) return reject(message);
  srv_.rejected++;
  fail(message);
}

bool Session::handle(const Frame& f) {
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

bool Session::request(const Frame& f) {
  switch (f.type) {
    case MsgType::kRegister: return on_register(f);
    case MsgType::kGetPeer: return on_get_peer(f);
    case MsgType::kSet: return on_set(f);
    case MsgType::kGet: return on_get(f);
    case MsgType::kAdd: return on_add(f);
    case MsgType::kWait: return on_wait(f);
    case MsgType::kBarrier: return on_barrier(f);
    case MsgType::kFatal: return on_fatal(f);
    default:
      fail(std::string("unexpected message ") + msg_type_name(f.type));
      return false;
  }
}

bool Session::on_register(const Frame& f) {
  auto& s = srv_;
  auto q = decode_register(f.payload);
  if (!q) return fail(q.error().message), false;
  if (bool keep_reading = true; !register_in_round(*q, keep_reading)) return keep_reading;
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
  elastic_round_ = s.elastic_round;
  round_ = ++s.reg_count[rank_];
  s.owner[rank_] = shared_from_this();
  s.peers[rank_] = PeerInfo{q->rank, q->host, q->addr, q->port};
  s.pending_register.push_back(shared_from_this());
  if (elastic_round_ > 0 && s.cbs.on_elastic_registered) s.cbs.on_elastic_registered(elastic_round_, rank_);
  if (round_ == 1) s.on_registered();
  else s.on_reregistered(round_);
  return true;
}

bool Session::register_in_round(const RegisterRequest& q, bool& keep_reading) {
  int current = srv_.elastic_round;
  if (q.round == current) {
    if (current > 0 && rank_ >= 0 && elastic_round_ != current) {  // its earlier round is over
      rank_ = -1;
      finalized_ = false;
    }
    return true;
  }
  keep_reading = false;
  std::string who = "rank " + std::to_string(q.rank);
  if (q.round == 0)
    return fail(who + " registered with no elastic round; this is an elastic job (round " + std::to_string(current) +
                ")"),
           false;
  if (current == 0)
    return fail(who + " registered for elastic round " + std::to_string(q.round) + "; this job is not elastic"),
           false;
  if (rank_ >= 0) return fail("this connection already registered rank " + std::to_string(rank_)), false;
  keep_reading = true;
  send(MsgType::kStaleRound, encode_i64(current));
  return false;
}

void Session::tell_stale_round() {
  rank_ = -1;
  round_ = 0;
  elastic_round_ = 0;
  send(MsgType::kStaleRound, encode_i64(srv_.elastic_round));
}

bool Session::on_get_peer(const Frame& f) {
  auto& s = srv_;
  auto r = decode_i64(f.payload);
  if (!r) return fail(r.error().message), false;
  // Elastic: this connection's round is over, and the table is another round's (its ranks
  // may be other processes, or not registered yet): told, as a stale register is.
  if (elastic_round_ != 0 && !current())
    send(MsgType::kStaleRound, encode_i64(s.elastic_round));
  else if (*r < 0 || *r >= static_cast<int64_t>(s.peers.size()) || s.peers[*r].rank < 0)
    send(MsgType::kNotFound, "");
  else
    send(MsgType::kPeer, encode_peer(s.peers[*r]));
  return true;
}

bool Session::on_set(const Frame& f) {
  auto& s = srv_;
  auto kv = decode_key_value(f.payload);
  if (!kv) return fail(kv.error().message), false;
  if (kv->first.rfind(kStallKeyPrefix, 0) == 0 && s.cbs.on_stall)
    s.cbs.on_stall(reported_rank(), kv->first, kv->second);
  if (rank_ >= 0 && kv->first == kFinalizedKeyPrefix + std::to_string(rank_)) finalized_ = true;
  if (current() && kv->first == kSilentKeyPrefix + std::to_string(rank_) && s.cbs.on_silent) {
    // A value that names no rank is stored but not acted on.
    if (auto peer = parse_int(kv->second, "silent peer", 0, static_cast<long long>(s.peers.size()) - 1))
      s.cbs.on_silent(rank_, static_cast<int>(*peer));
  }
  if (current() && kv->first == kLostKeyPrefix + std::to_string(rank_) && s.cbs.on_lost) {
    if (auto peer = parse_int(kv->second, "lost peer", 0, static_cast<long long>(s.peers.size()) - 1))
      s.cbs.on_lost(rank_, static_cast<int>(*peer));
  }
  tell_elastic_commit(kv->first, kv->second);
  if (auto st = s.store(kv->first, std::move(kv->second)); !st) return fail(st.error().message), false;
  send(MsgType::kOk, "");
  s.notify_key(kv->first);
  return true;
}

// Rank 0 of the current elastic round set the commit the round starts from.
void Session::tell_elastic_commit(const std::string& key, const std::string& value) {
  auto& s = srv_;
  if (!current() || elastic_round_ <= 0 || !s.cbs.on_elastic_commit ||
      key != kElasticCommitKeyPrefix + std::to_string(elastic_round_))
    return;
  if (auto commit = parse_int(value, "elastic commit", 0, 1ll << 62)) s.cbs.on_elastic_commit(elastic_round_, *commit);
}

bool Session::on_get(const Frame& f) {
  auto& s = srv_;
  auto key = decode_string(f.payload);
  if (!key) return fail(key.error().message), false;
  auto it = s.kv.find(*key);
  if (it == s.kv.end())
    send(MsgType::kNotFound, "");
  else
    send(MsgType::kValue, encode_string(it->second));
  return true;
}

bool Session::on_add(const Frame& f) {
  auto& s = srv_;
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

bool Session::on_wait(const Frame& f) {
  auto w = decode_wait(f.payload);
  if (!w) return fail(w.error().message), false;
  return park(w->second, w->first);
}

bool Session::on_barrier(const Frame& f) {
  auto& s = srv_;
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

bool Session::on_fatal(const Frame& f) {
  auto& s = srv_;
  auto m = decode_string(f.payload);
  if (!m) return fail(m.error().message), false;
  if (m->size() > kMaxFatalMessage)
    *m = m->substr(0, kMaxFatalMessage) + "... (" + std::to_string(m->size() - kMaxFatalMessage) +
         " bytes more)";
  if (s.cbs.on_fatal) s.cbs.on_fatal(reported_rank(), *m);
  send(MsgType::kOk, "");
  return true;
}

bool Session::park(const std::vector<std::string>& keys, uint32_t timeout_ms) {
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

void Session::write_next() {
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

}  // namespace hvdrun::rdv
