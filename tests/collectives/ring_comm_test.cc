// The ring's communicator (collectives/ring_comm.cc): close and the idle wait, the
// negotiation's framed allgather, time-outs.
#include "collectives/ring_comm.h"

#include <gtest/gtest.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <fstream>

#include "ring_fixture.h"

namespace hvdrun {
namespace {

using namespace ringtest;

// Whether thread `tid` of this process is in a system call that waits (poll, futex).
bool waiting_in_syscall(pid_t tid) {
  std::ifstream f("/proc/self/task/" + std::to_string(tid) + "/syscall");
  long nr = -1;
  if (!(f >> nr)) return false;  // "running"
#ifdef SYS_poll
  if (nr == SYS_poll) return true;
#endif
  return nr == SYS_ppoll || nr == SYS_futex || nr == 449;  // 449: futex_waitv (5.16+), every architecture
}

// The engine's background thread waits in watch_left() while another thread may close the
// ring (a failed collective): close() wakes it and waits for it, over TCP (a poll() with
// no time limit) and over shared memory; then watch_left() returns at once.
TEST(Ring, CloseWakesAWatcherAndWaitsForIt) {
  for (const char* mode : {"unix", "shm"}) {
    SCOPED_TRACE(mode);
    auto rings = make_rings(2, {}, mode);
    ASSERT_TRUE(rings[0] && rings[1]);
    UniqueFd wake_fd(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
    std::atomic<uint32_t> word{0};
    std::atomic<pid_t> tid{0};
    std::atomic<bool> stop{false};
    // As the engine's thread does, it watches until told to stop (over shared memory each
    // watch ends within 20 ms).
    auto watcher = std::async(std::launch::async, [&] {
      tid = static_cast<pid_t>(syscall(SYS_gettid));
      while (!stop) rings[0]->watch_left(wake_fd.get(), &word, 0, -1);
    });
    // close() comes once the watcher waits in the kernel, holding the pairs.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!(tid && waiting_in_syscall(tid)) && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
    ASSERT_TRUE(tid && waiting_in_syscall(tid)) << "the watcher never waited";
    auto closer = std::async(std::launch::async, [&] { rings[0]->close("test"); });
    ASSERT_EQ(closer.wait_for(std::chrono::seconds(10)), std::future_status::ready) << "close() hung on the watcher";
    stop = true;
    ASSERT_EQ(watcher.wait_for(std::chrono::seconds(10)), std::future_status::ready);
    // Closed: a watch with no time limit returns at once.
    auto again = std::async(std::launch::async, [&] { rings[0]->watch_left(wake_fd.get(), &word, 0, -1); });
    EXPECT_EQ(again.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  }
}

// The engine's idle wait: a rank's left pair has nothing to read until its left neighbour
// starts a collective (which sends its header first), then wait_left() sees it.
TEST(Ring, LeftBecomesReadableWhenTheLeftNeighbourStartsACollective) {
  for (const char* mode : {"unix", "shm"}) {
    SCOPED_TRACE(mode);
    auto rings = make_rings(2, {}, mode);
    ASSERT_TRUE(rings[0] && rings[1]);
    EXPECT_FALSE(rings[0]->left_readable());
    UniqueFd wake_fd(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
    std::atomic<uint32_t> word{0};
    auto peer = std::async(std::launch::async, [&] { return rings[1]->barrier(); });
    // Over shared memory a wait ends within 20 ms: wait again until the header is there.
    auto waited = std::async(std::launch::async, [&] {
      while (!rings[0]->left_readable()) rings[0]->wait_left(wake_fd.get(), &word, 0, -1);
    });
    ASSERT_EQ(waited.wait_for(std::chrono::seconds(10)), std::future_status::ready);
    EXPECT_TRUE(rings[0]->barrier().ok());
    ASSERT_EQ(peer.wait_for(std::chrono::seconds(10)), std::future_status::ready);
    EXPECT_TRUE(peer.get().ok());
    // A wake word that moved ends the wait at once, nothing to read.
    word = 1;
    auto woken = std::async(std::launch::async, [&] { rings[0]->wait_left(wake_fd.get(), &word, 0, -1); });
    EXPECT_EQ(woken.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  }
}

// The engine's negotiation (allgather_bytes) sends each message whole while it receives the
// peer's length: a message larger than the ring (or the socket buffers) must not leave both
// neighbours waiting for room that only the other's next step frees. Rings of 4 KiB, 3 and
// 2 ranks, messages from empty to past the ring, the socket buffers and the old 32 KiB
// eager bound.
TEST(Ring, AllgatherBytesOfMessagesLargerThanTheChannelDoNotDeadlock) {
  // A deadlock never moves again: it ends as a time-out (HVDRUN_TIMEOUT's default, 60 s),
  // not a hang. 5 s was less than a rank may wait here with nothing to move, under ASan and
  // load: in the mixed ring of 3, rank 2's next step is what rank 1 is still receiving from
  // rank 0 through the 4 KiB ring (1.5 MB); rank 2 timed out there ("no progress with rank
  // 1 (host h) for 5 s"), and its closed connections failed the others.
  RingOptions o;
  for (int n : {2, 3}) {
    for (const char* mode : {"unix", "shm", "mixed"}) {
      SCOPED_TRACE(std::to_string(n) + " ranks, " + mode);
      std::vector<std::string> hosts(n, "h");  // mixed: the last rank on a host of its own (TCP to it)
      if (std::string(mode) == "mixed") hosts[n - 1] = "other";
      auto rings = std::string(mode) == "unix" ? make_rings(n, o, mode) : make_pair_rings(n, o, hosts, 4096);
      for (auto& r : rings) ASSERT_TRUE(r);
      auto errors = on_all(n, [&](int r) -> std::string {
        for (size_t len : {size_t{0}, size_t{100}, size_t{4000}, size_t{5000}, size_t{20000}, size_t{32768},
                           size_t{300000}, size_t{1500000}}) {
          std::vector<std::string> all(n);
          all[r].assign(Ring::kFrameBytes, '\0');
          for (size_t i = 0; i < len + r; ++i) all[r].push_back(static_cast<char>('a' + (i * 7 + r) % 26));
          if (auto s = rings[r]->allgather_bytes(&all); !s) return std::to_string(len) + " bytes: " + s.error().message;
          for (int p = 0; p < n; ++p) {
            if (all[p].size() != Ring::kFrameBytes + len + p) return "wrong length from rank " + std::to_string(p);
            for (size_t i = 0; i < len + p; ++i)
              if (all[p][Ring::kFrameBytes + i] != static_cast<char>('a' + (i * 7 + p) % 26))
                return "wrong byte " + std::to_string(i) + " from rank " + std::to_string(p);
          }
        }
        return "";
      });
      for (int r = 0; r < n; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
    }
  }
}

TEST(Ring, SilentPeerTimesOut) {
  RingOptions o;
  o.timeout_s = 0.5;
  auto rings = make_rings(2, o);
  std::vector<float> buf(10, 1.f);
  auto s = rings[0]->allreduce(buf.data(), buf.data(), 10, HVD_FLOAT32, HVD_OP_SUM);  // rank 1 never calls
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().kind, ErrorKind::kTimeout);
  EXPECT_NE(s.error().message.find("no progress with rank 1 (host h)"), std::string::npos) << s.error().message;
}

}  // namespace
}  // namespace hvdrun
