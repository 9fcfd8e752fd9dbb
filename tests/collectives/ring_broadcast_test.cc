// The ring broadcast (collectives/ring_broadcast.cc) over every transport, ranks as threads.
#include "collectives/ring.h"

#include <gtest/gtest.h>

#include "ring_fixture.h"

namespace hvdrun {
namespace {

using namespace ringtest;

class RingBroadcast : public ::testing::TestWithParam<RingCase> {};

TEST_P(RingBroadcast, FromEveryRoot) {
  const int n = GetParam().n;
  RingOptions o;
  o.segment_bytes = 4096;
  auto rings = make_rings(n, o, GetParam().mode);
  const size_t count = 5000;
  auto results = on_all(n, [&](int r) -> std::string {
    for (int root = 0; root < n; ++root) {
      std::vector<int32_t> buf(count, -1);
      if (r == root)
        for (size_t i = 0; i < count; ++i) buf[i] = static_cast<int32_t>(root * 100000 + i);
      auto s = rings[r]->broadcast(buf.data(), count, HVD_INT32, root);
      if (!s) return s.error().message;
      for (size_t i = 0; i < count; ++i)
        if (buf[i] != static_cast<int32_t>(root * 100000 + i)) return "broadcast from " + std::to_string(root);
    }
    return "";
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(results[r], "") << "rank " << r;
}

INSTANTIATE_TEST_SUITE_P(Sizes, RingBroadcast, every_ring_case(), ring_case_name);

}  // namespace
}  // namespace hvdrun
