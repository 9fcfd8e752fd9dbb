// The NCCL unique id's relay through the job's store, ranks as threads sharing an in-memory
// store (transport/memory_store.h; no server, no CUDA).
#include "collectives/nccl_id.h"

#include <future>
#include <gtest/gtest.h>

#include "hvdrun/hvdrun.h"
#include "transport/memory_store.h"

namespace hvdrun {
namespace {

std::string id_of(char c) { return std::string(kNcclIdBytes, c); }

TEST(NcclIdRelay, KeyOfTheFirstCommunicatorIsTheProtocols) {
  EXPECT_EQ(nccl_id_key(0), "hvdrun/nccl/unique_id");
  EXPECT_EQ(nccl_id_key(2), "hvdrun/nccl/unique_id/2");
}

TEST(NcclIdRelay, RankZerosIdReachesEveryRankAndOnlyRankZeroMakesOne) {
  const int size = 5;
  transport::MemoryStore store;
  std::atomic<int> made{0};
  std::vector<std::future<Result<std::string>>> ranks;
  for (int r = size - 1; r >= 0; --r)  // the waiters first
    ranks.push_back(std::async(std::launch::async, [&, r]() -> Result<std::string> {
      return exchange_nccl_id(&store, r, size, 0, [&]() -> Result<std::string> { ++made; return id_of('\x7f'); }, 10);
    }));
  for (auto& f : ranks) {
    auto id = f.get();
    ASSERT_TRUE(id.ok()) << id.error().message;
    EXPECT_EQ(*id, id_of('\x7f'));
  }
  EXPECT_EQ(made.load(), 1);
}

TEST(NcclIdRelay, EachGenerationHasItsOwnId) {
  transport::MemoryStore store;
  for (int gen = 0; gen < 3; ++gen) {
    auto waiter = std::async(std::launch::async, [&] {
      return exchange_nccl_id(&store, 1, 2, gen, [] { return Result<std::string>(id_of('x')); }, 10);
    });
    auto mine = exchange_nccl_id(&store, 0, 2, gen, [gen] { return Result<std::string>(id_of(static_cast<char>('a' + gen))); }, 10);
    ASSERT_TRUE(mine.ok());
    auto theirs = waiter.get();
    ASSERT_TRUE(theirs.ok()) << theirs.error().message;
    EXPECT_EQ(*theirs, id_of(static_cast<char>('a' + gen)));
  }
}

TEST(NcclIdRelay, AMissingRankZeroIsATimeOutNamingTheKey) {
  transport::MemoryStore store;
  auto id = exchange_nccl_id(&store, 1, 2, 0, [] { return Result<std::string>(id_of('x')); }, 0.3);
  ASSERT_FALSE(id.ok());
  EXPECT_EQ(id.error().kind, ErrorKind::kTimeout);
  EXPECT_EQ(id.error().message.rfind("waiting for rank 0's NCCL id (hvdrun/nccl/unique_id)", 0), 0u)
      << id.error().message;
}

TEST(NcclIdRelay, AnIdOfTheWrongSizeIsRefused) {
  transport::MemoryStore store;
  auto id = exchange_nccl_id(&store, 0, 2, 0, [] { return Result<std::string>(std::string(5, 'x')); }, 1);
  ASSERT_FALSE(id.ok());
  EXPECT_NE(id.error().message.find("5 bytes, expected 128"), std::string::npos);
  // A rank that reads a wrong-sized value says so too.
  ASSERT_TRUE(store.set(nccl_id_key(1), "short").ok());
  auto other = exchange_nccl_id(&store, 1, 2, 1, [] { return Result<std::string>(id_of('x')); }, 1);
  ASSERT_FALSE(other.ok());
  EXPECT_NE(other.error().message.find("has 5 bytes, expected 128"), std::string::npos) << other.error().message;
}

TEST(NcclIdRelay, AJobOfOneNeedsNoRendezvous) {
  auto id = exchange_nccl_id(nullptr, 0, 1, 0, [] { return Result<std::string>(id_of('z')); }, 1);
  ASSERT_TRUE(id.ok());
  EXPECT_EQ(*id, id_of('z'));
}

}  // namespace
}  // namespace hvdrun
