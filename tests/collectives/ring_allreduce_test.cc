// The ring allreduce (collectives/ring_allreduce.cc) over every transport, ranks as threads;
// "group" rings take the host's shared segment (shm_allreduce.cc).
#include "collectives/ring.h"

#include <gtest/gtest.h>

#include "ring_fixture.h"

namespace hvdrun {
namespace {

using namespace ringtest;

class RingAllreduce : public ::testing::TestWithParam<RingCase> {};

TEST_P(RingAllreduce, EveryDtypeOpCountAndPlacement) {
  const int n = GetParam().n;
  RingOptions o;
  o.segment_bytes = 4096;  // many segments even for modest counts
  auto rings = make_rings(n, o, GetParam().mode);
  std::vector<size_t> counts = {0, 1, static_cast<size_t>(std::max(n - 1, 0)), static_cast<size_t>(n + 1), 1003,
                                (1 << 20) + 3};
  auto results = on_all(n, [&](int r) -> std::string {
    for (int t = HVD_INT8; t <= HVD_FLOAT64; ++t)
      for (int op = HVD_OP_SUM; op <= HVD_OP_PRODUCT; ++op) {
        if (op == HVD_OP_AVERAGE && !dtype_is_float(static_cast<hvd_dtype_t>(t))) continue;
        for (size_t c : counts)
          for (bool ip : {false, true}) {
            std::string e = check_allreduce(*rings[r], n, c, static_cast<hvd_dtype_t>(t), static_cast<hvd_op_t>(op), ip);
            if (!e.empty())
              return std::string(dtype_name(static_cast<hvd_dtype_t>(t))) + " " + op_name(static_cast<hvd_op_t>(op)) +
                     " count " + std::to_string(c) + (ip ? " in place: " : ": ") + e;
          }
      }
    return "";
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(results[r], "") << "rank " << r;
}

TEST_P(RingAllreduce, LargeCountIsBitwiseIdenticalOnEveryRank) {
  const int n = GetParam().n;
  auto rings = make_rings(n, {}, GetParam().mode);
  const size_t count = (1 << 20) + 3;
  std::vector<std::vector<float>> out(n);
  auto results = on_all(n, [&](int r) -> std::string {
    std::vector<float> in(count);
    for (size_t i = 0; i < count; ++i) in[i] = 0.1f * static_cast<float>((r * 7 + i) % 13);  // inexact sums
    out[r].resize(count);
    auto s = rings[r]->allreduce(in.data(), out[r].data(), count, HVD_FLOAT32, HVD_OP_AVERAGE);
    return s ? "" : s.error().message;
  });
  for (int r = 0; r < n; ++r) ASSERT_EQ(results[r], "");
  for (int r = 1; r < n; ++r) EXPECT_EQ(std::memcmp(out[r].data(), out[0].data(), count * 4), 0) << "rank " << r;
}

INSTANTIATE_TEST_SUITE_P(Sizes, RingAllreduce, every_ring_case(), ring_case_name);

TEST(Ring, MismatchedCountsFailEverywhereWithoutHanging) {
  const int n = 3;
  RingOptions o;
  o.timeout_s = 20;
  auto rings = make_rings(n, o);
  auto results = on_all(n, [&](int r) -> std::string {
    std::vector<float> buf(100, 1.f);
    auto s = rings[r]->allreduce(buf.data(), buf.data(), r == 1 ? 99 : 100, HVD_FLOAT32, HVD_OP_SUM);
    return s ? "ok" : s.error().message;
  });
  // Rank 1 and its right neighbour see the disagreement; the third learns its ring broke.
  EXPECT_NE(results[1].find("rank 1 called allreduce(count=99, float32, sum) #0 but its left neighbour rank 0 (host h) "
                            "called allreduce(count=100, float32, sum) #0"),
            std::string::npos)
      << results[1];
  // Rank 2 sees either the disagreement or rank 1 closing the ring after seeing it.
  EXPECT_TRUE(results[2].find("called allreduce(count=99") != std::string::npos ||
              results[2].find("rank 1 (host h) closed") != std::string::npos)
      << results[2];
  EXPECT_NE(results[0], "ok");
}

class RingDeadPeer : public ::testing::TestWithParam<const char*> {};

TEST_P(RingDeadPeer, FailsFastNamingIt) {
  expect_dead_peer_named(GetParam(), [](Ring& ring, float* buf, size_t count) {
    return ring.allreduce(buf, buf, count, HVD_FLOAT32, HVD_OP_SUM);
  });
}

INSTANTIATE_TEST_SUITE_P(Transports, RingDeadPeer, ::testing::Values("unix", "shm", "cma", "group", "mixed"));

}  // namespace
}  // namespace hvdrun
