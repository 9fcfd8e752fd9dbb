// The in-memory store (transport/memory_store.cc) with ranks as threads.
#include "transport/memory_store.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <future>
#include <thread>
#include <vector>

namespace hvdrun::transport {
namespace {

constexpr auto kDeadline = std::chrono::seconds(10);

TEST(MemoryStore, SetThenGetAndAnAbsentKeyIsAnError) {
  MemoryStore s;
  ASSERT_TRUE(s.set("k", "v1").ok());
  ASSERT_TRUE(s.set("k", "v2").ok());
  auto v = s.get("k");
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, "v2");
  auto absent = s.get("nope");
  ASSERT_FALSE(absent.ok());
  EXPECT_NE(absent.error().message.find("'nope'"), std::string::npos);
}

TEST(MemoryStore, WaitReturnsOnceEveryKeyIsSet) {
  MemoryStore s;
  auto waiter = std::async(std::launch::async, [&] { return s.wait({"a", "b"}, 20); });
  ASSERT_TRUE(s.set("a", "1").ok());
  ASSERT_TRUE(s.set("b", "2").ok());
  ASSERT_EQ(waiter.wait_for(kDeadline), std::future_status::ready);
  EXPECT_TRUE(waiter.get().ok());
  EXPECT_TRUE(s.wait({"a"}, 0).ok());  // already there: no wait
}

TEST(MemoryStore, WaitAndBarrierPastTheirTimeOutAreTimeOuts) {
  MemoryStore s;
  ASSERT_TRUE(s.set("a", "1").ok());
  auto w = s.wait({"a", "missing"}, 0.05);
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.error().kind, ErrorKind::kTimeout);
  EXPECT_EQ(w.error().sys_errno, ETIMEDOUT);
  auto b = s.barrier("lonely", 2, 0.05);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.error().kind, ErrorKind::kTimeout);
  EXPECT_NE(b.error().message.find("barrier 'lonely'"), std::string::npos) << b.error().message;
}

// Each thread counts itself in before each round: none leaves round k before all n have
// counted themselves in k times, and a name serves round after round.
TEST(MemoryStore, BarrierReleasesEachRoundOnceNHaveCalled) {
  MemoryStore s;
  const int n = 4, rounds = 3;
  std::atomic<int> arrived{0};
  std::vector<std::future<std::string>> ranks;
  for (int r = 0; r < n; ++r)
    ranks.push_back(std::async(std::launch::async, [&]() -> std::string {
      for (int k = 1; k <= rounds; ++k) {
        ++arrived;
        if (auto b = s.barrier("b", n, 20); !b) return b.error().message;
        if (arrived.load() < k * n) return "left round " + std::to_string(k) + " early";
      }
      return "";
    }));
  for (auto& f : ranks) {
    ASSERT_EQ(f.wait_for(kDeadline), std::future_status::ready);
    EXPECT_EQ(f.get(), "");
  }
}

TEST(MemoryStore, PeerWaitsForTheRanksAddress) {
  MemoryStore s;
  auto asker = std::async(std::launch::async, [&] { return s.peer(1, std::chrono::steady_clock::now() + kDeadline); });
  s.add_peer({1, "h1", "10.0.0.1", 4000});
  ASSERT_EQ(asker.wait_for(kDeadline), std::future_status::ready);
  auto p = asker.get();
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->host, "h1");
  EXPECT_EQ(p->addr, "10.0.0.1");
  EXPECT_EQ(p->port, 4000);
  auto never = s.peer(2, std::chrono::steady_clock::now() + std::chrono::milliseconds(50));
  ASSERT_FALSE(never.ok());
  EXPECT_EQ(never.error().kind, ErrorKind::kTimeout);
  EXPECT_NE(never.error().message.find("rank 2"), std::string::npos);
}

}  // namespace
}  // namespace hvdrun::transport
