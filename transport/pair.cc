#include "transport/pair.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>
#include <vector>

#include "common/deadline.h"
#include "common/socket_io.h"
#include "common/auth.h"
#include "transport/socket_util.h"

namespace hvdrun::transport {
namespace {

constexpr uint32_t kPairMagic = 0x68766470;  // "hvdp"

// Exact handshake I/O, its errors in the handshake's words.
Status io_exact(int fd, char* buf, size_t len, bool write_side, Clock::time_point deadline) {
  auto s = write_side ? write_exact(fd, buf, len, deadline) : read_exact(fd, buf, len, deadline);
  if (s) return s;
  if (s.error().kind == ErrorKind::kPeerLost) return make_error(ErrorKind::kPeerLost,
                                                                "connection closed during the handshake");
  if (s.error().kind == ErrorKind::kTimeout) return with_message(s.error(), "handshake timed out");
  return s;
}

std::string pair_context(int from, int to, const std::string& nonce_a, const std::string& nonce_b) {
  std::string m = nonce_a + nonce_b;
  m.append(reinterpret_cast<const char*>(&from), 4);
  m.append(reinterpret_cast<const char*>(&to), 4);
  return m;
}

// What a connection error says: the peer, its address, then `what`.
using Describe = std::function<std::string(const std::string&)>;

// Steps 1-4 of the handshake, the connector's side: both ends prove they hold the secret.
Status prove_connector(const UniqueFd& fd, const PeerAddress& to, const PairOptions& o, const Describe& ctx) {
  // 1. -> magic, from, to, our nonce
  std::string nonce_i = auth::random_bytes(auth::kNonceBytes);
  std::string hello(12, '\0');
  int32_t from = o.self_rank, dest = to.rank;
  std::memcpy(hello.data(), &kPairMagic, 4);
  std::memcpy(hello.data() + 4, &from, 4);
  std::memcpy(hello.data() + 8, &dest, 4);
  hello += nonce_i;
  if (auto s = io_exact(fd.get(), hello.data(), hello.size(), true, o.deadline); !s) return with_message(s.error(), ctx(s.error().message));
  // 2. <- their nonce, their proof
  std::string reply(auth::kNonceBytes + auth::kMacBytes, '\0');
  if (auto s = io_exact(fd.get(), reply.data(), reply.size(), false, o.deadline); !s)
    return with_message(s.error(), ctx(s.error().message + " (refused: not this job's rank?)"));
  std::string nonce_a = reply.substr(0, auth::kNonceBytes);
  std::string ctx_bytes = pair_context(from, dest, nonce_i, nonce_a);
  if (!auth::constant_time_equal(reply.substr(auth::kNonceBytes), auth::hmac_sha256(o.secret, "pair-acceptor" + ctx_bytes)))
    return make_error(ErrorKind::kAuth,
                      ctx("the peer failed authentication (not this job's rank " + std::to_string(to.rank) + ")"));
  // 3. -> our proof
  std::string proof = auth::hmac_sha256(o.secret, "pair-initiator" + ctx_bytes);
  if (auto s = io_exact(fd.get(), proof.data(), proof.size(), true, o.deadline); !s) return with_message(s.error(), ctx(s.error().message));
  // 4. <- ok
  char ok = 0;
  if (auto s = io_exact(fd.get(), &ok, 1, false, o.deadline); !s || ok != 1)
    return make_error(ErrorKind::kAuth, ctx("the peer refused our authentication"));
  return {};
}

// Steps 5-6: the transport the data takes (a shared-memory ring to a peer on this host that
// maps it, else TCP).
Result<Pair> choose_transport(UniqueFd fd, const PeerName& name, const PeerAddress& to, const PairOptions& o,
                              const Describe& ctx) {
  // 5. -> the transport: 'T' (TCP), or 'S' pid fd token (a shared-memory ring we made)
  ShmChannel shm;
  std::string offer = "T";
  if (o.shm_ring_bytes > 0 && !o.self_host.empty() && to.host == o.self_host) {
    if (auto made = ShmChannel::create(o.shm_ring_bytes); made) {
      shm = std::move(*made);
      shm.set_single_copy_min(o.shm_single_copy_bytes);
      int32_t pid = getpid(), mfd = shm.memfd();
      offer = "S";
      offer.append(reinterpret_cast<const char*>(&pid), 4);
      offer.append(reinterpret_cast<const char*>(&mfd), 4);
      offer += shm.token();
    }
  }
  if (auto s = io_exact(fd.get(), offer.data(), offer.size(), true, o.deadline); !s)
    return with_message(s.error(), ctx(s.error().message));
  if (offer[0] == 'T') return Pair(std::move(fd), name);
  // 6. <- 1 when the peer mapped it (0: it could not; the data stays on TCP)
  char took = 0;
  if (auto s = io_exact(fd.get(), &took, 1, false, o.deadline); !s) return with_message(s.error(), ctx(s.error().message));
  shm.release_memfd();  // both have mapped it now (or it is not used): nothing of it outlives them
  if (took != 1) return Pair(std::move(fd), name);
  return Pair(std::move(fd), name, std::move(shm));
}

}  // namespace

Result<Pair> connect_pair(const PeerAddress& to, const PairOptions& o) {
  PeerName name{to.rank, to.host};
  auto ctx = [&](const std::string& what) { return "connect to " + name.describe() + " at " + to.addr + ":" +
                                                   std::to_string(to.port) + ": " + what; };
  addrinfo hints{}, *res = nullptr;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
  if (getaddrinfo(to.addr.c_str(), std::to_string(to.port).c_str(), &hints, &res) != 0)
    return make_error(ErrorKind::kInvalidArgument, ctx("bad address"));
  // The peer listens already (its port came from the rendezvous), so a refusal is final;
  // no route or network is not: a link that flapped a moment ago comes back.
  auto connected = connect_tcp_retrying(res->ai_addr, res->ai_addrlen, o.deadline, Refused::kFinal);
  freeaddrinfo(res);
  if (!connected) return with_message(connected.error(), ctx(connected.error().message));
  UniqueFd fd = std::move(*connected);
  tune_data_socket(fd.get(), o.buffer_bytes);
  if (auto s = prove_connector(fd, to, o, ctx); !s) return s.error();
  return choose_transport(std::move(fd), name, to, o, ctx);
}

Result<Pair> accept_pair(int listen_fd, const PeerAddress& from, const PairOptions& o) {
  PeerName name{from.rank, from.host};
  while (true) {
    pollfd p{listen_fd, POLLIN, 0};
    if (poll(&p, 1, ms_until(o.deadline)) == 0)
      return make_sys_error(ErrorKind::kTimeout, "accept from " + name.describe() + ": timed out", ETIMEDOUT);
    UniqueFd fd(accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
    if (!fd.valid()) {
      if (errno == EINTR || errno == EAGAIN || errno == ECONNABORTED) continue;
      return make_sys_error(ErrorKind::kSystem, "accept from " + name.describe() + ": " + std::strerror(errno), errno);
    }
    tune_data_socket(fd.get(), o.buffer_bytes);
    // A stranger gets at most a short handshake window, then we go back to listening.
    auto hs_deadline = std::min(o.deadline, Clock::now() + std::chrono::seconds(5));
    std::string hello(12 + auth::kNonceBytes, '\0');
    if (!io_exact(fd.get(), hello.data(), hello.size(), false, hs_deadline)) continue;
    uint32_t magic;
    int32_t r_from, r_to;
    std::memcpy(&magic, hello.data(), 4);
    std::memcpy(&r_from, hello.data() + 4, 4);
    std::memcpy(&r_to, hello.data() + 8, 4);
    if (magic != kPairMagic || r_from != from.rank || r_to != o.self_rank) continue;
    std::string nonce_i = hello.substr(12);
    std::string nonce_a = auth::random_bytes(auth::kNonceBytes);
    std::string ctx_bytes = pair_context(r_from, r_to, nonce_i, nonce_a);
    std::string reply = nonce_a + auth::hmac_sha256(o.secret, "pair-acceptor" + ctx_bytes);
    if (!io_exact(fd.get(), reply.data(), reply.size(), true, hs_deadline)) continue;
    std::string proof(auth::kMacBytes, '\0');
    if (!io_exact(fd.get(), proof.data(), proof.size(), false, hs_deadline)) continue;
    if (!auth::constant_time_equal(proof, auth::hmac_sha256(o.secret, "pair-initiator" + ctx_bytes))) continue;
    char ok = 1;
    if (!io_exact(fd.get(), &ok, 1, true, hs_deadline)) continue;
    char kind = 0;
    if (!io_exact(fd.get(), &kind, 1, false, hs_deadline)) continue;
    if (kind == 'T') return Pair(std::move(fd), name);
    if (kind != 'S') continue;
    std::string shm_offer(8 + ShmChannel::kTokenBytes, '\0');
    if (!io_exact(fd.get(), shm_offer.data(), shm_offer.size(), false, hs_deadline)) continue;
    int32_t pid, mfd;
    std::memcpy(&pid, shm_offer.data(), 4);
    std::memcpy(&mfd, shm_offer.data() + 4, 4);
    Result<ShmChannel> shm = make_error(ErrorKind::kInternal, "not taken");
    if (o.shm_accept) shm = ShmChannel::open(pid, mfd, shm_offer.substr(8));
    char took = shm ? 1 : 0;
    if (!io_exact(fd.get(), &took, 1, true, hs_deadline)) continue;
    if (!shm) return Pair(std::move(fd), name);
    return Pair(std::move(fd), name, std::move(*shm));
  }
}

namespace {

std::string closed_message(Pair& p) {
  std::string why = p.shm() ? p.shm()->peer_reason() : "";
  if (!why.empty()) return "connection to " + p.peer().describe() + " closed: it failed on: " + why;
  return "connection to " + p.peer().describe() + " closed (the peer exited or failed)";
}

// A closed connection names the peer lost (kPeerLost, peer_rank): the rank reports it, and
// hvdrun blames that peer when it exited 0 or left without failing itself.
Error closed_error(Pair& p) {
  Error e = make_error(ErrorKind::kPeerLost, closed_message(p));
  e.peer_rank = p.peer().rank;
  return e;
}

// An error on a connection: a reset or broken pipe means the peer's process closed it (a
// process that exits with unread data sends a reset, not an end of stream), and names the
// peer as closed_error does; another errno (no route, a time-out) says nothing of it.
Error lost_error(Pair& p, int err) {
  Error e = make_sys_error(ErrorKind::kSystem,
                           "connection to " + p.peer().describe() + " lost: " + std::strerror(err), err);
  if (err == ECONNRESET || err == EPIPE) {
    e.kind = ErrorKind::kPeerLost;
    e.peer_rank = p.peer().rank;
  }
  return e;
}

// The TCP connection beside a shared-memory ring carries nothing after the handshake: EOF
// or an error on it means the peer's process is gone. A reset says the same as an end of
// stream there (a killed peer with unread handshake bytes resets instead of closing), so
// both are named alike, whichever the kernel reports first.
Status check_alive(Pair& p) {
  char c;
  ssize_t n = ::recv(p.fd(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n == 0 || (n < 0 && errno == ECONNRESET)) return closed_error(p);
  if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
    return lost_error(p, errno);
  return {};
}

constexpr auto kLivenessSlice = std::chrono::milliseconds(20);

// A single-copy read that failed (-1, errno) or found the producer closed (0): a producer
// that is gone (ESRCH) or closed is named as closed_error does. A live peer whose memory
// the kernel will not copy (EFAULT, EPERM) is not a failure: the block is refused and its
// rest comes through the ring (Status ok, nothing delivered).
Status pull_error(Pair& p, ssize_t n) {
  if (n == 0 || errno == ESRCH) return closed_error(p);
  if (auto st = check_alive(p); !st) return st;
  p.shm()->refuse_block();
  return {};
}

// One transfer(): both directions' progress, driven in turns until every byte moved. A turn
// receives what has arrived (receive), sends what the channel takes (send), and when neither
// moved spins a while, then blocks on both (wait_for_peers).
class Transfer {
 public:
  Transfer(Pair* out, Pair* in, const TransferSpec& s, double timeout_s, int spin_us, bool spin_yields)
      : out_(out),
        in_(in),
        s_(s),
        timeout_s_(timeout_s),
        spin_yields_(spin_yields),
        spin_(std::chrono::microseconds(spin_us)),
        timeout_(seconds_to_duration(timeout_s)),
        in_shm_(s.recv_len ? in->shm() : nullptr),
        out_shm_(s.send_len ? out->shm() : nullptr),
        unit_(std::max<size_t>(1, s.direct_unit)),
        direct_(in_shm_ && s.on_recv_direct && !s.send_follows_recv && unit_ <= 16 && s.recv_len % unit_ == 0),
        partial_(s.sent_out != nullptr && !s.send_follows_recv) {
    // A whole message that is there already may go by single copy: the consumer copies it out
    // of our memory, and the send is done when it has (the caller keeps the buffer till then).
    posted_ = out_shm_ && !s.send_follows_recv && !partial_ && out_shm_->can_post(s.send_len);
    if (posted_) out_shm_->post(s.send, s.send_len);
    pulled_seen_ = posted_ ? out_shm_->block_progress() : 0;
  }

  Status run();

 private:
  Status receive(bool* progressed, bool* again);
  Status pull_block(size_t block, char* dst, size_t want, ssize_t* n_out, bool* progressed, bool* again);
  Status receive_in_place(bool* progressed);
  Status send(size_t can_send, bool* progressed);
  Status wait_for_peers(Clock::time_point now, size_t can_send);
  Error timed_out() const;

  Pair* const out_;
  Pair* const in_;
  const TransferSpec& s_;
  const double timeout_s_;
  const bool spin_yields_;
  const std::chrono::microseconds spin_;
  const Clock::duration timeout_;
  ShmChannel* const in_shm_;
  ShmChannel* const out_shm_;
  const size_t unit_;
  const bool direct_;
  const bool partial_;
  size_t sent_ = 0, received_ = 0, notified_ = 0;
  Clock::time_point last_progress_ = Clock::now();
  char bounce_[16];
  size_t bounce_fill_ = 0;
  bool posted_ = false;
  uint64_t pulled_seen_ = 0;
  bool tried_send_ = false;
};

Status Transfer::run() {
  while (received_ < s_.recv_len || (sent_ < s_.send_len && !(partial_ && tried_send_))) {
    bool progressed = false, again = false;
    if (received_ < s_.recv_len) {
      if (auto st = receive(&progressed, &again); !st) return st;
      if (again) continue;
    }
    size_t can_send = s_.send_follows_recv ? std::min(received_, s_.send_len) : s_.send_len;
    tried_send_ = true;
    if (sent_ < can_send)
      if (auto st = send(can_send, &progressed); !st) return st;
    if (partial_ && received_ == s_.recv_len) break;
    auto now = Clock::now();
    if (progressed) {
      last_progress_ = now;
      continue;
    }
    if (now - last_progress_ < spin_) {
      // A bounded spin before blocking. Unless this rank has a core of its own, the spin
      // yields the core at each turn (as Open MPI does when oversubscribed): when the peer
      // waits for a core (more ranks or other work than cores) it runs instead of us
      // burning its time slice.
      if (spin_yields_) sched_yield();
      continue;
    }
    if (now - last_progress_ > timeout_) return timed_out();
    if (auto st = wait_for_peers(now, can_send); !st) return st;
  }
  if (s_.sent_out) *s_.sent_out = sent_;
  return {};
}

// The receiving half of a turn: from the block the producer posted (single copy), from the
// ring in place (direct), from the ring, or from the socket. *again: the turn starts over
// (a single-copy block was refused: its rest comes through the ring).
Status Transfer::receive(bool* progressed, bool* again) {
  char* dst = s_.recv + received_;
  size_t want = s_.recv_len - received_;
  if (s_.recv_window) {
    dst = s_.recv + received_ % s_.recv_window;
    want = std::min(want, s_.recv_window - received_ % s_.recv_window);
  }
  ssize_t n = 0;
  if (size_t block = in_shm_ ? in_shm_->block_left() : 0) {
    if (auto st = pull_block(block, dst, want, &n, progressed, again); !st || *again) return st;
  } else if (direct_) {
    if (auto st = receive_in_place(progressed); !st) return st;
    n = 0;  // delivered already
  } else if (in_shm_) {
    n = static_cast<ssize_t>(in_shm_->read(dst, want));
    if (n == 0 && in_shm_->peer_closed()) return closed_error(*in_);
  } else {
    n = ::recv(in_->fd(), dst, want, MSG_DONTWAIT);
    if (n == 0) return closed_error(*in_);
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
      return lost_error(*in_, errno);
  }
  if (n > 0) {
    received_ += static_cast<size_t>(n);
    *progressed = true;
    if (s_.on_recv && (received_ - notified_ >= s_.notify_bytes || received_ == s_.recv_len)) {
      s_.on_recv(notified_, received_ - notified_);
      notified_ = received_;
    }
  }
  return {};
}

// Single copy, out of the producer's memory (where it posted the block): in place a unit
// split by the ring or the block's end goes through `bounce_`, whole units through a
// cache-sized buffer; plain bytes straight to their place (*n_out of them; 0 when delivered
// in place).
Status Transfer::pull_block(size_t block, char* dst, size_t want, ssize_t* n_out, bool* progressed, bool* again) {
  const bool via_bounce = direct_ && (bounce_fill_ || block < unit_);
  thread_local std::vector<char> scratch;
  char* to = dst;
  size_t len = std::min(want, std::max<size_t>(s_.notify_bytes, 64 << 10));
  if (via_bounce) {
    to = bounce_ + bounce_fill_;
    len = unit_ - bounce_fill_;
  } else if (direct_) {
    len = std::min({block, s_.recv_len - received_, std::max(unit_, s_.notify_bytes)});
    len -= len % unit_;
    if (scratch.size() < len) scratch.resize(len);
    to = scratch.data();
  }
  ssize_t n = in_shm_->pull(to, len);
  if (n <= 0) {
    *again = true;
    return pull_error(*in_, n);
  }
  *n_out = n;
  if (!direct_) return {};
  size_t got = static_cast<size_t>(n);
  *progressed = true;
  *n_out = 0;  // delivered here
  if (via_bounce) {
    bounce_fill_ += got;
    if (bounce_fill_ == unit_) {
      s_.on_recv_direct(received_, bounce_, unit_);
      bounce_fill_ = 0;
      received_ += unit_;
    }
  } else {
    size_t whole = got - got % unit_;  // short: keep the tail
    if (whole) s_.on_recv_direct(received_, scratch.data(), whole);
    bounce_fill_ = got - whole;
    std::memcpy(bounce_, scratch.data() + whole, bounce_fill_);
    received_ += whole;
  }
  return {};
}

// In place: whole units where they lie in the ring; a unit split by the ring's end (or not
// yet all written) goes through `bounce_`.
Status Transfer::receive_in_place(bool* progressed) {
  ssize_t n = 0;
  size_t left_bytes = s_.recv_len - received_, avail = 0;
  const char* p = bounce_fill_ ? nullptr : in_shm_->peek(&avail);
  // At most a segment at a time: the producer gets its space back as we go.
  size_t take = std::min({avail, left_bytes, std::max(unit_, s_.notify_bytes)});
  take -= take % unit_;
  if (take) {
    s_.on_recv_direct(received_, p, take);
    in_shm_->consume(take);
    n = static_cast<ssize_t>(take);
  } else if (bounce_fill_ || avail) {
    size_t got = in_shm_->read(bounce_ + bounce_fill_, unit_ - bounce_fill_);
    bounce_fill_ += got;
    *progressed |= got > 0;
    if (bounce_fill_ == unit_) {
      s_.on_recv_direct(received_, bounce_, unit_);
      bounce_fill_ = 0;
      n = static_cast<ssize_t>(unit_);
    }
  }
  if (n == 0 && !*progressed && in_shm_->peer_closed()) return closed_error(*in_);
  if (n > 0) {
    received_ += static_cast<size_t>(n);
    *progressed = true;
  }
  return {};
}

// The sending half of a turn, up to `can_send`: a posted block is watched (taken, refused,
// being copied), else bytes go into the ring or the socket.
Status Transfer::send(size_t can_send, bool* progressed) {
  const char* src = s_.send_follows_recv ? s_.recv : s_.send;
  if (posted_) {
    if (out_shm_->block_taken()) {
      size_t at = out_shm_->refused_at();
      sent_ = at == SIZE_MAX ? s_.send_len : at;  // refused: the rest goes through the ring
      posted_ = false;
      *progressed = true;
    } else if (out_shm_->peer_closed()) {
      return closed_error(*out_);
    } else if (uint64_t p = out_shm_->block_progress(); p != pulled_seen_) {
      pulled_seen_ = p;  // the consumer is copying: not a silent peer
      *progressed = true;
    }
  } else if (out_shm_) {
    size_t n = out_shm_->write(src + sent_, can_send - sent_);
    if (n == 0 && out_shm_->peer_closed()) return closed_error(*out_);
    sent_ += n;
    *progressed |= n > 0;
  } else {
    ssize_t n = ::send(out_->fd(), src + sent_, can_send - sent_, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n > 0) {
      sent_ += static_cast<size_t>(n);
      *progressed = true;
    } else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      return lost_error(*out_, errno);
    }
  }
  return {};
}

Error Transfer::timed_out() const {
  Pair* culprit = received_ < s_.recv_len ? in_ : out_;
  Error e = make_error(ErrorKind::kTimeout, "no progress with " + culprit->peer().describe() + " for " +
                                                std::to_string(int(timeout_s_)) + " s (HVDRUN_TIMEOUT)");
  e.peer_rank = culprit->peer().rank;
  return e;
}

// Nothing moved and the spin is over: blocks until a side that waits can move (futex on a
// ring, poll on a socket), at most until the time-out; then a ring's peer that can not have
// closed it (it died) is looked for on its TCP connection.
Status Transfer::wait_for_peers(Clock::time_point now, size_t can_send) {
  auto left = timeout_ - (now - last_progress_);
  bool recv_waits = received_ < s_.recv_len, send_waits = sent_ < can_send;
  pollfd p[2];
  int np = 0;
  ShmChannel::Wait w[2];
  int nw = 0;
  if (recv_waits) {
    if (in_shm_) w[nw++] = in_shm_->prepare_read_wait();
    else p[np++] = {in_->fd(), POLLIN, 0};
  }
  if (send_waits) {
    if (out_shm_) w[nw++] = out_shm_->prepare_write_wait();
    else p[np++] = {out_->fd(), POLLOUT, 0};
  }
  // Flagged as waiting: look once more, so that a wake sent before the flag is not lost.
  bool ready = (recv_waits && in_shm_ && in_shm_->readable()) || (send_waits && out_shm_ && out_shm_->writable());
  if (!ready) {
    if (np == 0) {
      futex_wait_any(w, nw, static_cast<long>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                                  std::min<Clock::duration>(left, kLivenessSlice)).count()) + 1);
    } else {
      // TCP alone: poll until the time-out (in 1 s slices); TCP and shared memory
      // mixed: poll in 1 ms slices, looking at the ring between them.
      int wait_ms = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(left).count()) + 1;
      poll(p, np, nw ? 1 : std::min(wait_ms, 1000));
    }
  }
  if (recv_waits && in_shm_) in_shm_->end_read_wait();
  if (send_waits && out_shm_) out_shm_->end_write_wait();
  // A local peer that died can not close its ring: its TCP connection tells.
  if (recv_waits && in_shm_ && !in_shm_->readable())
    if (auto st = check_alive(*in_); !st) return st;
  if (send_waits && out_shm_ && !out_shm_->writable())
    if (auto st = check_alive(*out_); !st) return st;
  return {};
}

}  // namespace

Status transfer(Pair* out, Pair* in, const TransferSpec& s, double timeout_s, int spin_us, bool spin_yields) {
  return Transfer(out, in, s, timeout_s, spin_us, spin_yields).run();
}

}  // namespace hvdrun::transport
