// The names of blocking calls (Runtime::BlockingName): what makes repeated blocking calls of
// one shape hit the engine's response cache, and the turns that keep calls from several threads
// paired in one order. (The checks of a call's buffers: buffer_checks_test.cc.)
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "collectives/runtime.h"

namespace hvdrun {
namespace {

TEST(BlockingName, EveryCallOfAKindHasOneName) {
  Runtime& rt = Runtime::instance();
  for (int i = 0; i < 3; ++i) {
    Runtime::BlockingName a(rt, "allreduce");
    EXPECT_EQ(a.name(), "hvdrun.allreduce") << "call " << i;
  }
  Runtime::BlockingName b(rt, "broadcast");
  EXPECT_EQ(b.name(), "hvdrun.broadcast");
}

// Issue 30.7: blocking calls of a kind from several threads run one at a time in a process
// (the k-th pairs with the k-th of every other rank); they used to run together under
// different names, which the ranks' threads could pair differently.
TEST(BlockingName, CallsOfAKindFromSeveralThreadsTakeTurns) {
  Runtime& rt = Runtime::instance();
  constexpr int kThreads = 4, kCalls = 2000;
  std::atomic<int> inside[2] = {0, 0}, overlaps{0};
  std::vector<std::thread> t;
  for (int i = 0; i < kThreads; ++i)
    t.emplace_back([&] {
      for (int k = 0; k < kCalls; ++k) {
        const int kind = k % 2;
        Runtime::BlockingName b(rt, kind ? "allreduce" : "allgather");
        if (inside[kind].fetch_add(1) != 0) overlaps.fetch_add(1);
        std::this_thread::yield();
        inside[kind].fetch_sub(1);
      }
    });
  for (auto& x : t) x.join();
  EXPECT_EQ(overlaps.load(), 0);
  // A call of one kind does not wait for a call of another kind in flight.
  Runtime::BlockingName held(rt, "allreduce");
  Runtime::BlockingName other(rt, "allgather");
  EXPECT_EQ(other.name(), "hvdrun.allgather");
}

}  // namespace
}  // namespace hvdrun
