// The shared segment of one host's ranks, with ranks as real processes (fork): they open
// rank 0's memfd through /proc, meet in barriers, and name a peer that is killed, closes
// the group or never comes.
#include "transport/shm_group.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <gtest/gtest.h>
#include <thread>

#include "blocked_in.h"

namespace hvdrun::transport {
namespace {

using Clock = std::chrono::steady_clock;

// What a child does once it has opened the group: its exit code says how it went.
using Child = int (*)(ShmGroup&);

struct Group {
  ShmGroup g;  // rank 0's, in this process
  std::vector<pid_t> kids;
  ~Group() {
    for (pid_t k : kids) {
      if (k <= 0) continue;  // reaped
      kill(k, SIGKILL);
      waitpid(k, nullptr, 0);
    }
  }
  int reap(size_t i) {  // the exit code of child i, within 20 s
    for (int t = 0; t < 2000; ++t) {
      int st = 0;
      if (waitpid(kids[i], &st, WNOHANG) == kids[i]) {
        kids[i] = -1;
        return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      }
      usleep(10000);
    }
    return -1;
  }
};

// n ranks: this process is rank 0, children 1..n-1 run `child`. Every rank has opened the
// segment and watches its peers when it returns (a first barrier proves it).
void make_group(Group& grp, int n, Child child, size_t slot = 4096) {
  auto g = ShmGroup::create(n, slot, "h");
  ASSERT_TRUE(g.ok()) << g.error().message;
  grp.g = std::move(*g);
  const int fd = grp.g.memfd();
  const std::string token = grp.g.token();
  for (int r = 1; r < n; ++r) {
    pid_t p = fork();
    ASSERT_GE(p, 0);
    if (p == 0) {
      auto mine = ShmGroup::open(getppid(), fd, token, r, n, "h");
      if (!mine.ok()) _exit(10);
      if (!mine->barrier(20, 50, true).ok()) _exit(11);  // every rank has mapped it
      if (!mine->watch_peers().ok()) _exit(12);
      if (!mine->barrier(20, 50, true).ok()) _exit(13);  // every rank watches
      _exit(child(*mine));
    }
    grp.kids.push_back(p);
  }
  ASSERT_TRUE(grp.g.barrier(20, 50, true).ok());
  grp.g.release_memfd();
  ASSERT_TRUE(grp.g.watch_peers().ok());
  ASSERT_TRUE(grp.g.barrier(20, 50, true).ok());
}

TEST(ShmGroup, RanksSeeEachOthersSlotsAfterEachBarrier) {
  Group grp;
  make_group(grp, 4, [](ShmGroup& g) {
    for (unsigned round = 0; round < 200; ++round) {
      std::memset(g.slot(round, g.rank()), static_cast<int>(round * 4 + g.rank()) & 0xff, g.slot_bytes());
      if (!g.barrier(20, 0, true).ok()) return 1;
      for (int r = 0; r < g.size(); ++r)
        if (g.slot(round, r)[g.slot_bytes() - 1] != static_cast<char>((round * 4 + r) & 0xff)) return 2;
      if (!g.barrier(20, 0, true).ok()) return 3;
    }
    return 0;
  });
  for (unsigned round = 0; round < 200; ++round) {
    std::memset(grp.g.slot(round, 0), static_cast<int>(round * 4) & 0xff, grp.g.slot_bytes());
    ASSERT_TRUE(grp.g.barrier(20, 0, true).ok());
    for (int r = 0; r < 4; ++r) ASSERT_EQ(grp.g.slot(round, r)[0], static_cast<char>((round * 4 + r) & 0xff));
    ASSERT_TRUE(grp.g.barrier(20, 0, true).ok());
  }
  for (size_t i = 0; i < grp.kids.size(); ++i) EXPECT_EQ(grp.reap(i), 0) << "rank " << i + 1;
}

TEST(ShmGroup, AKilledPeerIsNamedAtOnce) {
  Group grp;
  make_group(grp, 3, [](ShmGroup& g) {
    if (g.rank() == 2) pause();  // never arrives; killed below
    auto s = g.barrier(30, 50, true);
    return !s && s.error().kind == ErrorKind::kPeerLost && s.error().peer_rank == 2 ? 0 : 1;
  });
  pid_t victim = grp.kids[1];
  // Killed once this thread waits in the barrier (on its futex).
  const pid_t waiter = test_threads::this_thread_id();
  std::thread killer([victim, waiter] {
    EXPECT_TRUE(test_threads::wait_blocked_in(getpid(), waiter)) << "the barrier never waited";
    kill(victim, SIGKILL);
  });
  auto t0 = Clock::now();
  auto s = grp.g.barrier(30, 50, true);
  auto took = Clock::now() - t0;
  killer.join();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().kind, ErrorKind::kPeerLost);
  EXPECT_EQ(s.error().peer_rank, 2);
  EXPECT_NE(s.error().message.find("rank 2 (host h) exited (pid " + std::to_string(victim) + ")"), std::string::npos)
      << s.error().message;
  EXPECT_LT(took, std::chrono::seconds(5));  // noticed within slices, not the 30 s time-out
  EXPECT_EQ(grp.reap(0), 0);
}

TEST(ShmGroup, APeerThatClosesIsNamedWithItsReason) {
  Group grp;
  make_group(grp, 2, [](ShmGroup& g) {
    g.close("allreduce(count=3) #7: mismatch");
    return 0;
  });
  auto s = grp.g.barrier(30, 50, true);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().kind, ErrorKind::kPeerLost);
  EXPECT_EQ(s.error().peer_rank, 1);
  EXPECT_NE(s.error().message.find("rank 1 (host h) failed on: allreduce(count=3) #7: mismatch"), std::string::npos)
      << s.error().message;
  EXPECT_EQ(grp.reap(0), 0);
}

// The last rank to arrive passes at once and may fail (close) before a waiting rank looks
// again: the barrier held, so the waiter passes it too, and learns of the close only at the
// next one.
TEST(ShmGroup, ARankThatPassesAndThenClosesDoesNotFailTheBarrier) {
  Group grp;
  make_group(grp, 2, [](ShmGroup& g) {
    // Once the parent is asleep in the barrier.
    if (!test_threads::wait_blocked_in(getppid(), getppid())) return 2;
    if (!g.barrier(20, 0, true).ok()) return 1;
    g.close("failed right after the barrier");
    return 0;
  });
  auto s = grp.g.barrier(20, 0, true);
  EXPECT_TRUE(s.ok()) << s.error().message;
  auto next = grp.g.barrier(20, 0, true);
  ASSERT_FALSE(next.ok());
  EXPECT_NE(next.error().message.find("rank 1 (host h) failed on: failed right after the barrier"), std::string::npos)
      << next.error().message;
  EXPECT_EQ(grp.reap(0), 0);
}

TEST(ShmGroup, ASilentPeerTimesOutNamingIt) {
  Group grp;
  make_group(grp, 2, [](ShmGroup&) {
    pause();
    return 0;
  });
  auto t0 = Clock::now();
  auto s = grp.g.barrier(0.3, 50, true);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().kind, ErrorKind::kTimeout);
  EXPECT_EQ(s.error().peer_rank, 1);
  EXPECT_NE(s.error().message.find("no progress with rank 1 (host h)"), std::string::npos) << s.error().message;
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(5));
}

TEST(ShmGroup, SegmentOfAnotherTokenOrSizeIsRefused) {
  auto g = ShmGroup::create(2, 4096, "h");
  ASSERT_TRUE(g.ok());
  auto wrong_token = ShmGroup::open(getpid(), g->memfd(), std::string(ShmGroup::kTokenBytes, 'x'), 1, 2, "h");
  ASSERT_FALSE(wrong_token.ok());
  EXPECT_NE(wrong_token.error().message.find("is not the segment rank 0 announced"), std::string::npos);
  EXPECT_FALSE(ShmGroup::open(getpid(), g->memfd(), g->token(), 1, 3, "h").ok());
  EXPECT_FALSE(ShmGroup::open(getpid(), 0, g->token(), 1, 2, "h").ok());  // stdin: not a segment
  EXPECT_FALSE(ShmGroup::create(0, 4096, "h").ok());
}

TEST(ShmGroup, LeavesNothingInDevShm) {
  auto before = std::distance(std::filesystem::directory_iterator("/dev/shm"), {});
  {
    Group grp;
    make_group(grp, 3, [](ShmGroup& g) { return g.barrier(20, 50, true).ok() ? 0 : 1; });
    ASSERT_TRUE(grp.g.barrier(20, 50, true).ok());
    for (size_t i = 0; i < grp.kids.size(); ++i) EXPECT_EQ(grp.reap(i), 0);
  }
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator("/dev/shm"), {}), before);
}

}  // namespace
}  // namespace hvdrun::transport
