// The ring barrier (collectives/ring_barrier.cc) over every transport, ranks as threads.
#include "collectives/ring.h"

#include <gtest/gtest.h>

#include <atomic>

#include "ring_fixture.h"

namespace hvdrun {
namespace {

using namespace ringtest;

class RingBarrier : public ::testing::TestWithParam<RingCase> {};

// Each rank counts itself in before each barrier: none leaves barrier k before all n ranks
// have counted themselves in k times.
TEST_P(RingBarrier, NoRankLeavesBeforeEveryRankArrived) {
  const int n = GetParam().n;
  auto rings = make_rings(n, {}, GetParam().mode);
  std::atomic<int> arrived{0};
  auto results = on_all(n, [&](int r) -> std::string {
    for (int k = 1; k <= 3; ++k) {
      ++arrived;
      if (auto s = rings[r]->barrier(); !s) return s.error().message;
      if (int a = arrived.load(); a < k * n)
        return "left barrier " + std::to_string(k) + " with " + std::to_string(a) + " arrivals";
    }
    return "";
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(results[r], "") << "rank " << r;
}

INSTANTIATE_TEST_SUITE_P(Sizes, RingBarrier, every_ring_case(), ring_case_name);

}  // namespace
}  // namespace hvdrun
