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

}  // namespace

Result<Pair> connect_pair(const PeerAddress& to, const PairOptions& o) {
  PeerName name{to.rank, to.host};
  const std::string where = "connect to " + name.describe() + " at " + to.addr + ":" + std::to_string(to.port);
  auto ctx = [&](const std::string& what) { return where + ": " + what; };
  addrinfo hints{}, *res = nullptr;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
  if (getaddrinfo(to.addr.c_str(), std::to_string(to.port).c_str(), &hints, &res) != 0)
    return make_error(ErrorKind::kInvalidArgument, ctx("bad address"));
  // The peer listens already (its port came from the rendezvous), so a refusal is final;
  // no route or network is not: a link that flapped a moment ago comes back.
  auto connected = connect_tcp_retrying(res->ai_addr, res->ai_addrlen, o.deadline, Refused::kFinal);
  freeaddrinfo(res);
  if (!connected) return wrap(connected.error(), where);
  UniqueFd fd = std::move(*connected);
  tune_data_socket(fd.get(), o.buffer_bytes);
  // 1. -> magic, from, to, our nonce
  std::string nonce_i = auth::random_bytes(auth::kNonceBytes);
  std::string hello(12, '\0');
  int32_t from = o.self_rank, dest = to.rank;
  std::memcpy(hello.data(), &kPairMagic, 4);
  std::memcpy(hello.data() + 4, &from, 4);
  std::memcpy(hello.data() + 8, &dest, 4);
  hello += nonce_i;
  if (auto s = io_exact(fd.get(), hello.data(), hello.size(), true, o.deadline); !s) return wrap(s.error(), where);
  // 2. <- their nonce, their proof
  std::string reply(auth::kNonceBytes + auth::kMacBytes, '\0');
  if (auto s = io_exact(fd.get(), reply.data(), reply.size(), false, o.deadline); !s)
    return with_message(s.error(), ctx(s.error().message + " (refused: not this job's rank?)"));
  std::string nonce_a = reply.substr(0, auth::kNonceBytes);
  std::string ctx_bytes = pair_context(from, dest, nonce_i, nonce_a);
  if (!auth::constant_time_equal(reply.substr(auth::kNonceBytes), auth::hmac_sha256(o.secret, "pair-acceptor" + ctx_bytes)))
    return make_error(ErrorKind::kAuth, ctx("the peer failed authentication (not this job's rank " + std::to_string(to.rank) + ")"));
  // 3. -> our proof
  std::string proof = auth::hmac_sha256(o.secret, "pair-initiator" + ctx_bytes);
  if (auto s = io_exact(fd.get(), proof.data(), proof.size(), true, o.deadline); !s) return wrap(s.error(), where);
  // 4. <- ok
  char ok = 0;
  if (auto s = io_exact(fd.get(), &ok, 1, false, o.deadline); !s || ok != 1)
    return make_error(ErrorKind::kAuth, ctx("the peer refused our authentication"));
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
    return wrap(s.error(), where);
  if (offer[0] == 'T') return Pair(std::move(fd), name);
  // 6. <- 1 when the peer mapped it (0: it could not; the data stays on TCP)
  char took = 0;
  if (auto s = io_exact(fd.get(), &took, 1, false, o.deadline); !s) return wrap(s.error(), where);
  shm.release_memfd();  // both have mapped it now (or it is not used): nothing of it outlives them
  if (took != 1) return Pair(std::move(fd), name);
  return Pair(std::move(fd), name, std::move(shm));
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
// or an error on it means the peer's process is gone.
Status check_alive(Pair& p) {
  char c;
  ssize_t n = ::recv(p.fd(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n == 0) return closed_error(p);
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


}  // namespace

Status transfer(Pair* out, Pair* in, const TransferSpec& s, double timeout_s, int spin_us, bool spin_yields) {
  size_t sent = 0, received = 0, notified = 0;
  auto last_progress = Clock::now();
  auto spin = std::chrono::microseconds(spin_us);
  auto timeout = seconds_to_duration(timeout_s);
  ShmChannel* in_shm = s.recv_len ? in->shm() : nullptr;
  ShmChannel* out_shm = s.send_len ? out->shm() : nullptr;
  const size_t unit = std::max<size_t>(1, s.direct_unit);
  const bool direct = in_shm && s.on_recv_direct && !s.send_follows_recv && unit <= 16 && s.recv_len % unit == 0;
  char bounce[16];
  size_t bounce_fill = 0;
  const bool partial = s.sent_out != nullptr && !s.send_follows_recv;
  // A whole message that is there already may go by single copy: the consumer copies it out
  // of our memory, and the send is done when it has (the caller keeps the buffer till then).
  bool posted = out_shm && !s.send_follows_recv && !partial && out_shm->can_post(s.send_len);
  if (posted) out_shm->post(s.send, s.send_len);
  uint64_t pulled_seen = posted ? out_shm->block_progress() : 0;
  bool tried_send = false;
  while (received < s.recv_len || (sent < s.send_len && !(partial && tried_send))) {
    bool progressed = false;
    if (received < s.recv_len) {
      char* dst = s.recv + received;
      size_t want = s.recv_len - received;
      if (s.recv_window) {
        dst = s.recv + received % s.recv_window;
        want = std::min(want, s.recv_window - received % s.recv_window);
      }
      ssize_t n;
      if (size_t block = in_shm ? in_shm->block_left() : 0) {
        // Single copy, out of the producer's memory (where it posted the block): in place
        // a unit split by the ring or the block's end goes through `bounce`, whole units
        // through a cache-sized buffer; plain bytes straight to their place.
        const bool via_bounce = direct && (bounce_fill || block < unit);
        thread_local std::vector<char> scratch;
        char* to = dst;
        size_t len = std::min(want, std::max<size_t>(s.notify_bytes, 64 << 10));
        if (via_bounce) {
          to = bounce + bounce_fill;
          len = unit - bounce_fill;
        } else if (direct) {
          len = std::min({block, s.recv_len - received, std::max(unit, s.notify_bytes)});
          len -= len % unit;
          if (scratch.size() < len) scratch.resize(len);
          to = scratch.data();
        }
        n = in_shm->pull(to, len);
        if (n <= 0) {
          if (auto st = pull_error(*in, n); !st) return st;
          continue;
        }
        if (direct) {
          size_t got = static_cast<size_t>(n);
          progressed = true;
          n = 0;  // delivered here
          if (via_bounce) {
            bounce_fill += got;
            if (bounce_fill == unit) {
              s.on_recv_direct(received, bounce, unit);
              bounce_fill = 0;
              received += unit;
            }
          } else {
            size_t whole = got - got % unit;  // short: keep the tail
            if (whole) s.on_recv_direct(received, scratch.data(), whole);
            bounce_fill = got - whole;
            std::memcpy(bounce, scratch.data() + whole, bounce_fill);
            received += whole;
          }
        }
      } else if (direct) {
        // In place: whole units where they lie; a unit split by the ring's end (or not yet
        // all written) goes through `bounce`.
        n = 0;
        size_t left_bytes = s.recv_len - received, avail = 0;
        const char* p = bounce_fill ? nullptr : in_shm->peek(&avail);
        // At most a segment at a time: the producer gets its space back as we go.
        size_t take = std::min({avail, left_bytes, std::max(unit, s.notify_bytes)});
        take -= take % unit;
        if (take) {
          s.on_recv_direct(received, p, take);
          in_shm->consume(take);
          n = static_cast<ssize_t>(take);
        } else if (bounce_fill || avail) {
          size_t got = in_shm->read(bounce + bounce_fill, unit - bounce_fill);
          bounce_fill += got;
          progressed |= got > 0;
          if (bounce_fill == unit) {
            s.on_recv_direct(received, bounce, unit);
            bounce_fill = 0;
            n = static_cast<ssize_t>(unit);
          }
        }
        if (n == 0 && !progressed && in_shm->peer_closed()) return closed_error(*in);
        if (n > 0) {
          received += static_cast<size_t>(n);
          progressed = true;
        }
        n = 0;  // delivered already
      } else if (in_shm) {
        n = static_cast<ssize_t>(in_shm->read(dst, want));
        if (n == 0 && in_shm->peer_closed()) return closed_error(*in);
      } else {
        n = ::recv(in->fd(), dst, want, MSG_DONTWAIT);
        if (n == 0) return closed_error(*in);
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
          return lost_error(*in, errno);
      }
      if (n > 0) {
        received += static_cast<size_t>(n);
        progressed = true;
        if (s.on_recv && (received - notified >= s.notify_bytes || received == s.recv_len)) {
          s.on_recv(notified, received - notified);
          notified = received;
        }
      }
    }
    size_t can_send = s.send_follows_recv ? std::min(received, s.send_len) : s.send_len;
    tried_send = true;
    if (sent < can_send) {
      const char* src = s.send_follows_recv ? s.recv : s.send;
      if (posted) {
        if (out_shm->block_taken()) {
          size_t at = out_shm->refused_at();
          sent = at == SIZE_MAX ? s.send_len : at;  // refused: the rest goes through the ring
          posted = false;
          progressed = true;
        } else if (out_shm->peer_closed()) {
          return closed_error(*out);
        } else if (uint64_t p = out_shm->block_progress(); p != pulled_seen) {
          pulled_seen = p;  // the consumer is copying: not a silent peer
          progressed = true;
        }
      } else if (out_shm) {
        size_t n = out_shm->write(src + sent, can_send - sent);
        if (n == 0 && out_shm->peer_closed()) return closed_error(*out);
        sent += n;
        progressed |= n > 0;
      } else {
        ssize_t n = ::send(out->fd(), src + sent, can_send - sent, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n > 0) {
          sent += static_cast<size_t>(n);
          progressed = true;
        } else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
          return lost_error(*out, errno);
        }
      }
    }
    if (partial && received == s.recv_len) break;
    auto now = Clock::now();
    if (progressed) {
      last_progress = now;
      continue;
    }
    if (now - last_progress < spin) {
      // A bounded spin before blocking. Unless this rank has a core of its own, the spin
      // yields the core at each turn (as Open MPI does when oversubscribed): when the peer
      // waits for a core (more ranks or other work than cores) it runs instead of us
      // burning its time slice.
      if (spin_yields) sched_yield();
      continue;
    }
    if (now - last_progress > timeout) {
      Pair* culprit = received < s.recv_len ? in : out;
      Error e = make_error(ErrorKind::kTimeout, "no progress with " + culprit->peer().describe() + " for " +
                                                    std::to_string(int(timeout_s)) + " s (HVDRUN_TIMEOUT)");
      e.peer_rank = culprit->peer().rank;
      return e;
    }
    auto left = timeout - (now - last_progress);
    bool recv_waits = received < s.recv_len, send_waits = sent < can_send;
    pollfd p[2];
    int np = 0;
    ShmChannel::Wait w[2];
    int nw = 0;
    if (recv_waits) {
      if (in_shm) w[nw++] = in_shm->prepare_read_wait();
      else p[np++] = {in->fd(), POLLIN, 0};
    }
    if (send_waits) {
      if (out_shm) w[nw++] = out_shm->prepare_write_wait();
      else p[np++] = {out->fd(), POLLOUT, 0};
    }
    // Flagged as waiting: look once more, so that a wake sent before the flag is not lost.
    bool ready = (recv_waits && in_shm && in_shm->readable()) || (send_waits && out_shm && out_shm->writable());
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
    if (recv_waits && in_shm) in_shm->end_read_wait();
    if (send_waits && out_shm) out_shm->end_write_wait();
    // A local peer that died can not close its ring: its TCP connection tells.
    if (recv_waits && in_shm && !in_shm->readable())
      if (auto st = check_alive(*in); !st) return st;
    if (send_waits && out_shm && !out_shm->writable())
      if (auto st = check_alive(*out); !st) return st;
  }
  if (s.sent_out) *s.sent_out = sent;
  return {};
}

}  // namespace hvdrun::transport
