// The ring's communicator (collectives/ring_comm.h).
//
// Before each collective, every rank sends a small header (sequence number, kind, count,
// dtype, op, root) to its right and compares the one from its left with its own: ranks
// that disagree fail with both calls named instead of reducing garbage or hanging.
#include "collectives/ring_comm.h"

#include <poll.h>
#include <sys/socket.h>

#include <chrono>
#include <cstring>

#include "collectives/ring_header.h"

namespace hvdrun {

RingComm::RingComm(int rank, int size, transport::Pair right, transport::Pair left, RingOptions opts)
    : rank_(rank), size_(size), right_(std::move(right)), left_(std::move(left)), opts_(opts) {}

void RingComm::close(const std::string& reason) {
  closing_ = true;
  left_.interrupt();
  std::lock_guard<std::mutex> g(watch_mu_);
  right_.close(reason);
  left_.close(reason);
}

void RingComm::interrupt() {
  // (watch_left holds watch_mu_ while it waits: the engine's end_round woke it first.)
  std::lock_guard<std::mutex> g(watch_mu_);
  if (right_.valid()) ::shutdown(right_.fd(), SHUT_RDWR);
  if (left_.valid()) ::shutdown(left_.fd(), SHUT_RDWR);
}

Status RingComm::fail(Error e) {
  // A failed transfer leaves the ring in an unknown state: close it (and the hierarchy's
  // rings) so that the neighbours fail fast too, and refuse every later call with the
  // first reason.
  broken_ = true;
  broken_reason_ = e.message;
  if (on_fatal && (e.kind == ErrorKind::kMismatch || e.kind == ErrorKind::kTimeout)) on_fatal(e);
  if (on_peer_lost && e.kind == ErrorKind::kPeerLost && e.peer_rank >= 0) on_peer_lost(e.peer_rank);
  close(e.message);
  return e;
}

Error RingComm::broken_error() const {
  return make_error(ErrorKind::kPeerLost, "the ring is broken by an earlier failure: " + broken_reason_);
}

Error RingComm::transfer_failed(Error e) {
  const ErrorKind kind = e.kind == ErrorKind::kTimeout ? ErrorKind::kTimeout : ErrorKind::kPeerLost;
  return with_kind(std::move(e), kind);
}

Status RingComm::step(const char* send, size_t send_len, char* recv, size_t recv_len, bool forward,
                      const std::function<void(size_t, size_t)>& on_recv, size_t window,
                      const std::function<void(size_t, const char*, size_t)>& on_recv_direct, size_t unit) {
  transport::TransferSpec spec;
  spec.send = send;
  spec.send_len = send_len;
  spec.recv = recv;
  spec.recv_len = recv_len;
  spec.send_follows_recv = forward;
  spec.notify_bytes = window ? window : opts_.segment_bytes;
  spec.on_recv = on_recv;
  spec.recv_window = window;
  spec.on_recv_direct = on_recv_direct;
  spec.direct_unit = unit;
  return run(spec);
}

Status RingComm::run(const transport::TransferSpec& spec) {
  auto s = transport::transfer(&right_, &left_, spec, opts_.timeout_s, opts_.spin_us, opts_.spin_yields);
  if (!s)
    return fail(transfer_failed(s.error()));
  return {};
}

Status RingComm::check_agreement(const Header& mine) {
  if (broken_) return broken_error();
  if (size_ == 1) return {};
  Header theirs{};
  if (auto s = step(reinterpret_cast<const char*>(&mine), sizeof mine, reinterpret_cast<char*>(&theirs), sizeof theirs,
                    false);
      !s)
    return s;
  if (!(theirs == mine))
    return fail(make_error(ErrorKind::kMismatch,
                           "rank " + std::to_string(rank_) + " called " + mine.describe() + " but its left neighbour " +
                               left_.peer().describe() + " called " + theirs.describe()));
  return {};
}

// Variable-length allgather of byte strings (the engine's negotiation): each step sends
// the whole framed string while it receives the peer's 8-byte length, then receives the
// body while it sends what the channel had no room for. A string that fits the ring or the
// socket buffers leaves at once (one exchange, not a length round trip first); a longer one
// never makes both neighbours wait for room only the other's next step frees.
Status RingComm::allgather_bytes(std::vector<std::string>* all) {
  if (broken_) return broken_error();
  if (all->size() != static_cast<size_t>(size_) || (*all)[rank_].size() < kFrameBytes)
    return make_error(ErrorKind::kInternal, "internal: allgather_bytes needs one framed string per rank");
  for (int s = 0; s < size_ - 1; ++s) {
    int send_b = mod(rank_ - s, size_), recv_b = mod(rank_ - s - 1, size_);
    std::string& body = (*all)[send_b];
    uint64_t len = body.size() - kFrameBytes, got_len = 0;
    std::memcpy(body.data(), &len, sizeof len);
    size_t sent = 0;
    transport::TransferSpec first;
    first.send = body.data();
    first.send_len = body.size();
    first.recv = reinterpret_cast<char*>(&got_len);
    first.recv_len = sizeof got_len;
    first.sent_out = &sent;
    if (auto st = run(first); !st) return st;
    if (got_len > (64u << 20))
      return fail(make_error(ErrorKind::kInternal, "negotiation message of " + std::to_string(got_len) + " bytes from " +
                                                       left_.peer().describe() + " (corrupt stream)"));
    std::string& in = (*all)[recv_b];
    in.resize(kFrameBytes + got_len);
    if (auto st = step(body.data() + sent, body.size() - sent, in.data() + kFrameBytes, got_len, false); !st)
      return st;
  }
  return {};
}

bool RingComm::left_readable() {
  if (!left_.valid()) return false;
  if (auto* shm = left_.shm()) {
    if (shm->readable()) return true;
    // Beside a shared-memory ring the socket carries nothing, only EOF or an error when the
    // peer is gone: look at it every few milliseconds, not at every call (a syscall).
    auto now = std::chrono::steady_clock::now();
    if (now - last_socket_look_ < std::chrono::milliseconds(5)) return false;
    last_socket_look_ = now;
  }
  // Over TCP: data.
  pollfd p{left_.fd(), POLLIN, 0};
  return ::poll(&p, 1, 0) > 0;
}

void RingComm::wait_left(int wake_fd, std::atomic<uint32_t>* wake, uint32_t seen, int timeout_ms) {
  wait_on_left(wake_fd, wake, seen, timeout_ms, false);
}

void RingComm::watch_left(int wake_fd, std::atomic<uint32_t>* wake, uint32_t seen, int timeout_ms) {
  std::lock_guard<std::mutex> g(watch_mu_);
  if (closing_) return;
  wait_on_left(wake_fd, wake, seen, timeout_ms, true);
}

// The reader's wait and the watcher's differ only in the shared-memory ring's flag they
// raise (and what they look at: the reader's cached state, or the header alone).
void RingComm::wait_on_left(int wake_fd, std::atomic<uint32_t>* wake, uint32_t seen, int timeout_ms, bool watcher) {
  if (wake->load() != seen) return;  // (over TCP the eventfd may have been drained by the other waiter)
  auto* shm = left_.valid() ? left_.shm() : nullptr;
  if (!shm) {
    pollfd p[2] = {{wake_fd, POLLIN, 0}, {left_.valid() ? left_.fd() : -1, POLLIN, 0}};
    ::poll(p, left_.valid() ? 2 : 1, timeout_ms);
    return;
  }
  const int slice_ms = timeout_ms < 0 ? 20 : std::min(timeout_ms, 20);
  transport::ShmChannel::Wait w[2];
  w[0] = watcher ? shm->prepare_watch() : shm->prepare_read_wait();
  w[1] = {wake, seen};
  // The watcher looks at closing_ again: an interrupt() before prepare_watch() read the
  // word would be missed.
  bool ready = watcher ? closing_ || shm->has_data() : shm->readable();
  if (!ready && wake->load() == seen) transport::futex_wait_any(w, 2, static_cast<long>(slice_ms) * 1000000);
  if (watcher)
    shm->end_watch();
  else
    shm->end_read_wait();
}

}  // namespace hvdrun
