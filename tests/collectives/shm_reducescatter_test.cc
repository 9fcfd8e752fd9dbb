// The reducescatter through the host's shared segment (collectives/shm_reducescatter.cc).
// Every dtype, op and share: RingReducescatter's "group" cases (ring_reducescatter_test.cc).
#include "collectives/ring.h"

#include <gtest/gtest.h>

#include "ring_fixture.h"

namespace hvdrun {
namespace {

using namespace ringtest;

// A piece holds slot / n elements of each rank's share: shares that end just before, at
// and just past a piece's end, and over several pieces, in and out of place.
TEST(ShmReducescatter, SharesAcrossPieceBoundaries) {
  for (int n : {3, 4}) {
    SCOPED_TRACE(std::to_string(n) + " ranks");
    auto rings = make_rings(n, {}, "group");  // slots of a segment, at least 64 KiB
    const size_t slice = group_slot_bytes(std::max<size_t>(RingOptions{}.segment_bytes, 64 << 10), n) / sizeof(float) / n;
    auto results = on_all(n, [&](int r) -> std::string {
      for (size_t rows : {slice * n - 1, slice * n, slice * n + 1, 3 * slice * n + 2})
        for (const char* place : {"out", "own"})
          if (std::string e = check_reducescatter(*rings[r], n, rows, 1, HVD_FLOAT32, HVD_OP_SUM, place); !e.empty())
            return std::to_string(rows) + " rows (" + place + "): " + e;
      return "";
    });
    for (int r = 0; r < n; ++r) EXPECT_EQ(results[r], "") << "rank " << r;
  }
}

}  // namespace
}  // namespace hvdrun
