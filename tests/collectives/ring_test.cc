// What ring.cc holds beside the algorithms: the hierarchy's rings attached to a ring, and
// Ring::close closing them with the ring's own pairs. The algorithms: ring_<name>_test.cc.
#include "collectives/ring.h"

#include <gtest/gtest.h>

#include "ring_fixture.h"

namespace hvdrun {
namespace {

using namespace ringtest;

TEST(Ring, AJobOfOneRunsEveryCollectiveWithoutPairs) {
  auto rings = make_rings(1);
  std::vector<float> in{1, 2, 3}, out(3);
  ASSERT_TRUE(rings[0]->allreduce(in.data(), out.data(), 3, HVD_FLOAT32, HVD_OP_SUM).ok());
  EXPECT_EQ(out, in);
  ASSERT_TRUE(rings[0]->broadcast(in.data(), 3, HVD_FLOAT32, 0).ok());
  ASSERT_TRUE(rings[0]->barrier().ok());
  EXPECT_EQ(rings[0]->left_fd(), -1);
  EXPECT_FALSE(rings[0]->hierarchy().allreduce);
}

// Closing rank 0's ring closes its local and cross rings too: its neighbours on them fail
// at once with the peer lost (not after the time-out, as they would if those stayed open).
TEST(Ring, CloseClosesTheHierarchysRingsToo) {
  const std::vector<std::string> hosts = {"a", "a", "b", "b"};
  RingOptions o;
  o.timeout_s = 60;
  auto rings = make_pair_rings(4, o, hosts);
  attach_test_hierarchy(rings, hosts, o);
  for (auto& r : rings) ASSERT_TRUE(r && r->hierarchy().allreduce);
  rings[0]->close("bye");
  std::vector<Error> errors(4);
  on_all_void(4, [&](int r) {
    if (r == 0) return;
    std::vector<float> buf(10, 1.f);
    auto s = rings[r]->allreduce(buf.data(), buf.data(), buf.size(), HVD_FLOAT32, HVD_OP_SUM);
    errors[r] = s ? Error{"ok"} : s.error();
  });
  // Rank 1 shares host a's local ring with rank 0 only.
  EXPECT_EQ(errors[1].kind, ErrorKind::kPeerLost) << errors[1].message;
  EXPECT_EQ(errors[1].peer_rank, 0) << errors[1].message;
  for (int r : {2, 3}) EXPECT_EQ(errors[r].kind, ErrorKind::kPeerLost) << "rank " << r << ": " << errors[r].message;
}

}  // namespace
}  // namespace hvdrun
