// The hierarchical collectives (collectives/ring_hierarchical.cc) with ranks as threads.
#include "collectives/ring.h"

#include <gtest/gtest.h>

#include "ring_fixture.h"

namespace hvdrun {
namespace {

using namespace ringtest;

// Hierarchical collectives with ranks as threads: hosts x per_host ranks, local rings over
// shared memory, cross rings over TCP, the global ring mixed (the flat fallback).
struct HierCase {
  int hosts, per_host;
  bool interleaved;  // ranks dealt round-robin to the hosts instead of in blocks
};
void PrintTo(const HierCase& c, std::ostream* os) {
  *os << c.hosts << " hosts x " << c.per_host << (c.interleaved ? " interleaved" : "");
}
class RingHierarchy : public ::testing::TestWithParam<HierCase> {};

TEST_P(RingHierarchy, AllreduceAndAllgatherAreRightAndIdenticalEverywhere) {
  const auto [C, L, interleaved] = GetParam();
  const int n = C * L;
  std::vector<std::string> hosts(n);
  for (int r = 0; r < n; ++r) hosts[r] = "host" + std::to_string(interleaved ? r % C : r / L);
  RingOptions o;
  o.segment_bytes = 4096;
  auto rings = make_pair_rings(n, o, hosts);
  attach_test_hierarchy(rings, hosts, o);
  const size_t big = (1 << 18) + 5;
  std::vector<std::vector<float>> avg(n);
  auto results = on_all(n, [&](int r) -> std::string {
    for (int t = HVD_INT8; t <= HVD_FLOAT64; ++t)
      for (int op = HVD_OP_SUM; op <= HVD_OP_PRODUCT; ++op) {
        if (op == HVD_OP_AVERAGE && !dtype_is_float(static_cast<hvd_dtype_t>(t))) continue;
        for (size_t c : {size_t{0}, size_t{1}, static_cast<size_t>(L - 1), static_cast<size_t>(n + 1), size_t{1003}, big})
          for (bool ip : {false, true}) {
            std::string e = check_allreduce(*rings[r], n, c, static_cast<hvd_dtype_t>(t), static_cast<hvd_op_t>(op), ip);
            if (!e.empty())
              return std::string(dtype_name(static_cast<hvd_dtype_t>(t))) + " " + op_name(static_cast<hvd_op_t>(op)) +
                     " count " + std::to_string(c) + (ip ? " in place: " : ": ") + e;
          }
      }
    std::vector<float> in(big);
    for (size_t i = 0; i < big; ++i) in[i] = 0.1f * static_cast<float>((r * 7 + i) % 13);  // inexact sums
    avg[r].resize(big);
    if (auto s = rings[r]->allreduce(in.data(), avg[r].data(), big, HVD_FLOAT32, HVD_OP_AVERAGE); !s)
      return s.error().message;
    for (size_t c : {size_t{0}, size_t{1}, size_t{5000}}) {
      std::vector<int64_t> gin(c), gout(c * n, -1);
      for (size_t i = 0; i < c; ++i) gin[i] = r * 1000000 + static_cast<int64_t>(i);
      if (auto s = rings[r]->allgather(gin.data(), gout.data(), c, HVD_INT64); !s) return s.error().message;
      for (int p = 0; p < n; ++p)
        for (size_t i = 0; i < c; ++i)
          if (gout[p * c + i] != p * 1000000 + static_cast<int64_t>(i)) return "allgather block " + std::to_string(p);
    }
    // A reducescatter takes the flat ring beside the hierarchy.
    for (size_t rw : {static_cast<size_t>(n + 1), size_t{5003}})
      if (std::string e = check_reducescatter(*rings[r], n, rw, 3, HVD_FLOAT32, HVD_OP_AVERAGE, "out"); !e.empty())
        return "reducescatter of " + std::to_string(rw) + " rows: " + e;
    if (auto s = rings[r]->barrier(); !s) return s.error().message;  // the flat ring still works beside
    return "";
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(results[r], "") << "rank " << r;
  for (int r = 1; r < n; ++r) EXPECT_EQ(std::memcmp(avg[r].data(), avg[0].data(), big * 4), 0) << "rank " << r;
}

INSTANTIATE_TEST_SUITE_P(Layouts, RingHierarchy,
                         ::testing::Values(HierCase{2, 2, false}, HierCase{2, 3, false}, HierCase{3, 2, false},
                                           HierCase{2, 2, true}),
                         [](const ::testing::TestParamInfo<HierCase>& i) {
                           return std::to_string(i.param.hosts) + "x" + std::to_string(i.param.per_host) +
                                  (i.param.interleaved ? "_interleaved" : "");
                         });


}  // namespace
}  // namespace hvdrun
