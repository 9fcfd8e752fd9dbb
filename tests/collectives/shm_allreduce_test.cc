// The allreduce through the host's shared segment (collectives/shm_allreduce.cc). Every
// dtype, op and count: RingAllreduce's "group" cases (ring_allreduce_test.cc).
#include "collectives/ring.h"

#include <gtest/gtest.h>

#include "ring_fixture.h"

namespace hvdrun {
namespace {

using namespace ringtest;

// Through the host's shared segment every rank compares every rank's call: all of them
// name the one that differs.
TEST(Ring, MismatchedCountsInTheHostSegmentFailOnEveryRank) {
  const int n = 3;
  RingOptions o;
  o.timeout_s = 20;
  auto rings = make_rings(n, o, "group");
  auto results = on_all(n, [&](int r) -> std::string {
    std::vector<float> buf(100, 1.f);
    auto s = rings[r]->allreduce(buf.data(), buf.data(), r == 1 ? 99 : 100, HVD_FLOAT32, HVD_OP_SUM);
    return s ? "ok" : s.error().message;
  });
  EXPECT_NE(results[0].find("rank 0 called allreduce(count=100, float32, sum) #3 but rank 1 called "
                            "allreduce(count=99, float32, sum) #3"),
            std::string::npos)
      << results[0];
  EXPECT_NE(results[1].find("rank 1 called allreduce(count=99, float32, sum) #3 but rank 0 called"), std::string::npos)
      << results[1];
  EXPECT_NE(results[2].find("but rank 1 called allreduce(count=99"), std::string::npos) << results[2];
}

}  // namespace
}  // namespace hvdrun
