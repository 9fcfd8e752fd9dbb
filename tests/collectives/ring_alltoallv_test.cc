// The ring alltoallv (collectives/ring_alltoallv.cc) over every transport, ranks as threads.
#include "collectives/ring.h"

#include <gtest/gtest.h>

#include "ring_fixture.h"

namespace hvdrun {
namespace {

using namespace ringtest;

class RingAlltoallv : public ::testing::TestWithParam<RingCase> {};

// Rank s sends rank d (s + 2d) % 5 * 300 bytes (some blocks empty, to itself too), each
// byte naming both: every rank receives every block addressed to it, by source.
TEST_P(RingAlltoallv, EveryBlockReachesItsDestinationInSourceOrder) {
  const int n = GetParam().n;
  RingOptions o;
  o.segment_bytes = 4096;
  auto rings = make_rings(n, o, GetParam().mode);
  std::vector<size_t> bytes(static_cast<size_t>(n) * n);
  for (int s = 0; s < n; ++s)
    for (int d = 0; d < n; ++d) bytes[s * n + d] = (s + 2 * d) % 5 * 300;
  auto byte_of = [](int s, int d, size_t i) { return static_cast<char>(s * 37 + d * 11 + i % 241); };
  auto results = on_all(n, [&](int r) -> std::string {
    std::string in, want;
    for (int d = 0; d < n; ++d)
      for (size_t i = 0; i < bytes[r * n + d]; ++i) in.push_back(byte_of(r, d, i));
    for (int s = 0; s < n; ++s)
      for (size_t i = 0; i < bytes[s * n + r]; ++i) want.push_back(byte_of(s, r, i));
    std::string out(want.size(), '\0');
    if (auto s = rings[r]->alltoallv(in.data(), out.data(), bytes); !s) return s.error().message;
    return out == want ? "" : "the blocks received differ from those sent to rank " + std::to_string(r);
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(results[r], "") << "rank " << r;
}

INSTANTIATE_TEST_SUITE_P(Sizes, RingAlltoallv, every_ring_case(), ring_case_name);

}  // namespace
}  // namespace hvdrun
