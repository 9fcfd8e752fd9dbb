// The ring allgather and allgatherv (collectives/ring_allgather.cc) over every transport,
// ranks as threads.
#include "collectives/ring.h"

#include <gtest/gtest.h>

#include "ring_fixture.h"

namespace hvdrun {
namespace {

using namespace ringtest;

class RingAllgather : public ::testing::TestWithParam<RingCase> {};

TEST_P(RingAllgather, EveryRanksBlockInRankOrder) {
  const int n = GetParam().n;
  RingOptions o;
  o.segment_bytes = 4096;
  auto rings = make_rings(n, o, GetParam().mode);
  auto results = on_all(n, [&](int r) -> std::string {
    for (size_t c : {size_t{0}, size_t{1}, size_t{5000}}) {
      std::vector<int64_t> in(c), out(c * n, -1);
      for (size_t i = 0; i < c; ++i) in[i] = r * 1000000 + static_cast<int64_t>(i);
      auto s = rings[r]->allgather(in.data(), out.data(), c, HVD_INT64);
      if (!s) return s.error().message;
      for (int p = 0; p < n; ++p)
        for (size_t i = 0; i < c; ++i)
          if (out[p * c + i] != p * 1000000 + static_cast<int64_t>(i)) return "allgather block " + std::to_string(p);
    }
    return "";
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(results[r], "") << "rank " << r;
}

// Blocks of different sizes (empty ones among them), in place (this rank's block already
// where it belongs in recv) and not.
TEST_P(RingAllgather, AllgathervBlocksOfEverySize) {
  const int n = GetParam().n;
  RingOptions o;
  o.segment_bytes = 4096;
  auto rings = make_rings(n, o, GetParam().mode);
  std::vector<size_t> bytes(n), off(n + 1, 0);
  for (int p = 0; p < n; ++p) off[p + 1] = off[p] + (bytes[p] = p % 3 == 1 ? 0 : 1000 * p + 7);
  auto byte_of = [](int p, size_t i) { return static_cast<char>(p * 31 + i % 251); };
  auto results = on_all(n, [&](int r) -> std::string {
    for (bool in_place : {false, true}) {
      std::vector<char> out(off[n] + 1, '\x5a'), in(bytes[r]);
      for (size_t i = 0; i < bytes[r]; ++i) (in_place ? out[off[r] + i] : in[i]) = byte_of(r, i);
      auto s = rings[r]->allgatherv(in_place ? out.data() + off[r] : in.data(), out.data(), bytes);
      if (!s) return s.error().message;
      for (int p = 0; p < n; ++p)
        for (size_t i = 0; i < bytes[p]; ++i)
          if (out[off[p] + i] != byte_of(p, i)) return "block of rank " + std::to_string(p) + ", byte " + std::to_string(i);
      if (out[off[n]] != '\x5a') return "wrote past the blocks";
    }
    return "";
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(results[r], "") << "rank " << r;
}

INSTANTIATE_TEST_SUITE_P(Sizes, RingAllgather, every_ring_case(), ring_case_name);

}  // namespace
}  // namespace hvdrun
