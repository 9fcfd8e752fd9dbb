// A data-plane connection between two ranks of the ring: TCP, TCP_NODELAY, large buffers,
// opened with a handshake that proves both ends hold the job secret and names both ranks,
// so that a stranger or a rank of another job is refused. Data flows one way on each pair
// (we send to the right neighbour on one pair and receive from the left on another), and
// transfer() drives both at once: full duplex.
//
// Between two ranks of one host (same host name in the rendezvous, and the connector asked
// for it with PairOptions::shm_ring_bytes) the handshake goes on to set up a shared-memory
// ring (transport/shm.h) and the data flows there instead; the TCP connection stays open
// beside it as the liveness signal (EOF when the peer's process is gone).
#pragma once

#include <sys/socket.h>

#include <chrono>
#include <functional>
#include <string>

#include "common/result.h"
#include "common/tunables.h"
#include "common/unique_fd.h"
#include "transport/shm.h"

namespace hvdrun::transport {

using Clock = std::chrono::steady_clock;

// Where a peer's data plane listens (from the rendezvous' registration; the transport
// does not depend on the rendezvous).
struct PeerAddress {
  int rank = -1;
  std::string host;  // as written in -H: ranks with the same host share a machine
  std::string addr;  // data-plane address
  int port = 0;
};

struct PeerName {
  int rank = -1;
  std::string host;
  std::string describe() const { return "rank " + std::to_string(rank) + " (host " + host + ")"; }
};

class Pair {
 public:
  Pair() = default;
  Pair(UniqueFd fd, PeerName peer) : fd_(std::move(fd)), peer_(std::move(peer)) {}
  Pair(UniqueFd fd, PeerName peer, ShmChannel shm) : fd_(std::move(fd)), peer_(std::move(peer)), shm_(std::move(shm)) {}
  bool valid() const { return fd_.valid(); }
  int fd() const { return fd_.get(); }
  const PeerName& peer() const { return peer_; }
  // The shared-memory ring, or null when the data flows over TCP.
  ShmChannel* shm() { return shm_.valid() ? &shm_ : nullptr; }
  bool is_shm() const { return shm_.valid(); }
  // Wakes a thread watching this pair for data (ShmChannel::prepare_watch(), or poll() on
  // the socket) before close() takes the pair away: a shared-memory ring's data word is
  // bumped; a TCP pair's socket is shut down. (Beside a shared-memory ring the socket is
  // left alone: close() first writes why into the ring, and the peer reads the socket's
  // EOF as the cue to read it.)
  void interrupt() {
    if (shm_.valid())
      shm_.interrupt();
    else if (fd_.valid())
      ::shutdown(fd_.get(), SHUT_RDWR);
  }
  // `reason`: why this side gives up (a shared-memory peer names it in its error).
  void close(const std::string& reason = "") {
    shm_.close(reason);
    fd_.reset();
  }

 private:
  UniqueFd fd_;
  PeerName peer_;
  ShmChannel shm_;
};

struct PairOptions {
  std::string secret;
  int self_rank = -1;
  std::string self_host;      // ours, as the rendezvous knows it
  size_t shm_ring_bytes = 0;  // connector: offer shared memory to a same-host peer (0: TCP only)
  // connector: over shared memory, messages of at least this many bytes go by single copy
  // (ShmChannel::post; 0: never)
  size_t shm_single_copy_bytes = 0;
  bool shm_accept = true;     // acceptor: take such an offer
  int buffer_bytes = static_cast<int>(tunable_default("HVDRUN_SOCKET_BUFFER"));
  Clock::time_point deadline;
};

// Connects to `to` (addr:port) and proves who we are; `to.rank` is checked too.
Result<Pair> connect_pair(const PeerAddress& to, const PairOptions& o);
// Accepts connections on `listen_fd` until one proves it is `from` of this job (others are
// refused and closed), or the deadline passes.
Result<Pair> accept_pair(int listen_fd, const PeerAddress& from, const PairOptions& o);

// One step of a ring collective: send `send_len` bytes to `out` while receiving
// `recv_len` bytes from `in`. When `send_follows_recv` is set, the bytes to send are the
// ones being received (a chain forward), and sending never overtakes receiving.
// `on_recv(offset, len)` is called as received bytes arrive, in order (pipelined reduce).
// Spins up to `spin_us` before blocking in poll; fails after `timeout_s` without progress,
// or when a peer closes or resets, naming the peer.
struct TransferSpec {
  const char* send = nullptr;
  size_t send_len = 0;
  char* recv = nullptr;
  size_t recv_len = 0;
  bool send_follows_recv = false;
  size_t notify_bytes = 256 * 1024;  // granularity of on_recv calls
  // When set, `recv` is a window of this many bytes reused in turn (a segment buffer that
  // stays in cache): byte k of the stream lands at recv[k % recv_window], and on_recv is
  // called as each window fills, before it is overwritten. Must be a multiple of notify_bytes.
  size_t recv_window = 0;
  std::function<void(size_t offset, size_t len)> on_recv;
  // Optional, used instead of the window and on_recv when `in` is a shared-memory ring:
  // the received bytes are handed over where they lie in the ring, in order, in pieces of
  // whole `direct_unit`s (an element; recv_len must be a multiple of it), and the ring
  // space is given back after each call. Saves the copy into the window.
  std::function<void(size_t offset, const char* data, size_t len)> on_recv_direct;
  size_t direct_unit = 1;
  // When set, the transfer ends once every byte is received, with as much sent as the
  // channel took meanwhile (at least one try); *sent_out says how much. A framed exchange
  // sends its whole message this way while it receives only the peer's length, so it never
  // waits on room the peer frees only in its next step (a message larger than the ring or
  // the socket buffers would deadlock both).
  size_t* sent_out = nullptr;
};

// `spin_yields`: sched_yield() at each turn of the spin (a rank without a core of its own).
Status transfer(Pair* out, Pair* in, const TransferSpec& spec, double timeout_s, int spin_us, bool spin_yields = true);

}  // namespace hvdrun::transport
