// The communicator of the ring collectives: a rank's two data-plane pairs, `right` (we
// send) and `left` (we receive), and what every algorithm does over them (one step, the
// header agreement, failing and closing, the engine's idle wait, the framed byte-string
// allgather of its negotiation). The algorithms are Ring's (collectives/ring.h), one file
// each.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "common/result.h"
#include "common/tunables.h"
#include "hvdrun/hvdrun.h"
#include "transport/pair.h"

namespace hvdrun {

struct RingOptions {
  // The tunables' defaults (common/tunables.cc); the runtime sets them from the environment.
  double timeout_s = tunable_default("HVDRUN_TIMEOUT");
  int spin_us = static_cast<int>(tunable_default("HVDRUN_SPIN_US"));
  bool spin_yields = true;            // false: this rank has a core of its own (bound, not oversubscribed)
  size_t segment_bytes = static_cast<size_t>(tunable_default("HVDRUN_SEGMENT_BYTES"));
  size_t small_bytes = 64 << 10;     // one-pass allreduce while (n-1) x its bytes are at most this
};

class RingComm {
 public:
  // size 1: no pairs needed.
  RingComm(int rank, int size, transport::Pair right, transport::Pair left, RingOptions opts);
  virtual ~RingComm() = default;

  int rank() const { return rank_; }
  int size() const { return size_; }

  // Engine-level helpers (collectives/engine.cc). Every rank calls them in the same order.
  // Gathers one byte string from every rank (lengths may differ). Each string begins with
  // kFrameBytes of room for its length (written here, so nothing is copied to frame it): the
  // caller puts its own at (*all)[rank] (all->size() == size), and finds rank r's at
  // (*all)[r], room included. The strings keep their capacity from call to call.
  static constexpr size_t kFrameBytes = 8;
  Status allgather_bytes(std::vector<std::string>* all);
  // The engine's idle wait: a peer that starts the next cycle sends to its right, so this
  // rank's left pair has data (over TCP or shared memory), or its connection ended.
  bool left_readable();
  // Blocks until left_readable(), `wake_fd` is readable, *wake moved from `seen`, or
  // timeout_ms passes (-1: no limit). Over shared memory it waits on the ring's futex and
  // the wake word together, looking at the TCP connection every 20 ms.
  void wait_left(int wake_fd, std::atomic<uint32_t>* wake, uint32_t seen, int timeout_ms);
  // The same wait for a thread other than the one running the collectives (the engine's
  // background thread, while a caller runs them): it reads none of the reader's state, and
  // close() wakes it and waits for it to let go of the pairs. Over shared memory it returns
  // every 20 ms at most.
  void watch_left(int wake_fd, std::atomic<uint32_t>* wake, uint32_t seen, int timeout_ms);
  // Closes the pairs (Ring::close: the hierarchy's rings and the shared segment too): the
  // neighbours see this rank gone, with `reason` over shared memory. A failed collective
  // does it; so may another thread.
  virtual void close(const std::string& reason);
  // Shuts the pairs' sockets down, from any thread: the transfer in flight and every later
  // one fail at once (beside a shared-memory ring, within its 20 ms look at the socket).
  // The thread using the ring then closes it as after any failure. Another thread in
  // watch_left() must have been woken first (the engine's end_round does it).
  virtual void interrupt();
  // The pairs' sockets (-1 in a job of one), for tests that cut them.
  int left_fd() const { return left_.fd(); }
  int right_fd() const { return right_.fd(); }
  bool broken() const { return broken_; }
  const std::string& broken_reason() const { return broken_reason_; }

  // Called with the message of a mismatch or time-out before the ring is closed, so that
  // hvdrun hears the cause before the neighbours fail on the closed connections.
  std::function<void(const Error&)> on_fatal;
  // Called with the rank whose connection closed (kPeerLost) before the ring is closed and
  // the error returned, so that hvdrun knows whom this rank's failure came from.
  std::function<void(int peer)> on_peer_lost;

 protected:
  struct Header;  // collectives/ring_header.h
  Status check_agreement(const Header& mine);
  Status step(const char* send, size_t send_len, char* recv, size_t recv_len, bool forward,
              const std::function<void(size_t, size_t)>& on_recv = {}, size_t window = 0,
              const std::function<void(size_t, const char*, size_t)>& on_recv_direct = {}, size_t unit = 1);
  Status run(const transport::TransferSpec& spec);  // a transfer on our pairs; a failure breaks the ring
  Status fail(Error e);
  // What every call answers once the ring is broken (kPeerLost, naming the first failure).
  Error broken_error() const;
  // A transfer's failure as the ring's: a time-out stays one, any other is the peer lost.
  static Error transfer_failed(Error e);

  int rank_, size_;
  transport::Pair right_, left_;
  RingOptions opts_;
  uint64_t seq_ = 0;
  bool broken_ = false;
  std::string broken_reason_;

 private:
  std::mutex watch_mu_;  // held by watch_left() while it looks at left_; close() takes it
  std::atomic<bool> closing_{false};  // close() was called: watch_left() returns at once
  std::chrono::steady_clock::time_point last_socket_look_;  // left_readable() beside shared memory
  void wait_on_left(int wake_fd, std::atomic<uint32_t>* wake, uint32_t seen, int timeout_ms, bool watcher);
};

}  // namespace hvdrun
