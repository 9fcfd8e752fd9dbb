// The ring reducescatter (collectives/ring_reducescatter.cc) over every transport, ranks as
// threads; "group" rings take the host's shared segment (shm_reducescatter.cc).
#include "collectives/ring.h"

#include <gtest/gtest.h>

#include "ring_fixture.h"

namespace hvdrun {
namespace {

using namespace ringtest;

class RingReducescatter : public ::testing::TestWithParam<RingCase> {};

// Shares of every size (zero rows on some ranks when rows < n, uneven when rows % n != 0),
// rows of one and of several elements, every op, in and out of place.
TEST_P(RingReducescatter, EveryShareOpAndPlacement) {
  const int n = GetParam().n;
  RingOptions o;
  o.segment_bytes = 4096;
  auto rings = make_rings(n, o, GetParam().mode);
  const std::vector<size_t> rows = {0, 1, static_cast<size_t>(std::max(n - 1, 1)), static_cast<size_t>(n + 1), 1003,
                                    (1 << 17) + 3};
  auto results = on_all(n, [&](int r) -> std::string {
    for (hvd_dtype_t t : {HVD_INT8, HVD_INT32, HVD_BFLOAT16, HVD_FLOAT32, HVD_FLOAT64})
      for (int op = HVD_OP_SUM; op <= HVD_OP_PRODUCT; ++op) {
        if (op == HVD_OP_AVERAGE && !dtype_is_float(t)) continue;
        for (size_t rw : rows)
          for (size_t row_elems : {size_t{1}, size_t{3}})
            for (const char* place : {"out", "own", "front"}) {
              if (rw > 1003 && (row_elems > 1 || std::string(place) != "out")) continue;
              std::string e = check_reducescatter(*rings[r], n, rw, row_elems, t, static_cast<hvd_op_t>(op), place);
              if (!e.empty())
                return std::string(dtype_name(t)) + " " + op_name(static_cast<hvd_op_t>(op)) + " rows " +
                       std::to_string(rw) + " x " + std::to_string(row_elems) + " (" + place + "): " + e;
            }
      }
    return "";
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(results[r], "") << "rank " << r;
}

INSTANTIATE_TEST_SUITE_P(Sizes, RingReducescatter, every_ring_case(), ring_case_name);

// A reducescatter whose rows differ fails like an allreduce, naming both calls: over the
// ring the right neighbour of the odd one out, through the host's segment every rank.
TEST(Ring, MismatchedReducescatterRowsFailNamingBothCalls) {
  for (const char* mode : {"unix", "group"}) {
    SCOPED_TRACE(mode);
    const int n = 3;
    RingOptions o;
    o.timeout_s = 20;
    auto rings = make_rings(n, o, mode);
    auto results = on_all(n, [&](int r) -> std::string {
      std::vector<float> in(100 * 2, 1.f), out(34 * 2);
      auto s = rings[r]->reducescatter(in.data(), out.data(), r == 1 ? 99 : 100, 2, HVD_FLOAT32, HVD_OP_SUM);
      return s ? "ok" : s.error().message;
    });
    EXPECT_NE(results[1].find("rank 1 called reducescatter(rows=99, row_elems=2, float32, sum) #"), std::string::npos)
        << results[1];
    EXPECT_TRUE(results[2].find("called reducescatter(rows=99") != std::string::npos ||
                results[2].find("rank 1 (host h) closed") != std::string::npos)
        << results[2];
    EXPECT_NE(results[0], "ok");
  }
}

class RingReducescatterDeadPeer : public ::testing::TestWithParam<const char*> {};

TEST_P(RingReducescatterDeadPeer, FailsFastNamingIt) {
  expect_dead_peer_named(GetParam(), [](Ring& ring, float* buf, size_t count) {
    return ring.reducescatter(buf, buf + count / 2, count, 1, HVD_FLOAT32, HVD_OP_SUM);
  });
}

INSTANTIATE_TEST_SUITE_P(Transports, RingReducescatterDeadPeer, ::testing::Values("unix", "shm", "cma", "group", "mixed"));

}  // namespace
}  // namespace hvdrun
