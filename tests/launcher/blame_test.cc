#include "launcher/blame.h"

#include <gtest/gtest.h>

using namespace hvdrun;

TEST(Blame, TheNamedRankThatNeverReportedIsTheOneStalled) {
  // Ring 0->1->2->3->0, rank 2 stopped: 3 names 2 (right), 0 names 3 and 1 names 0 (wrong),
  // whichever of them reports first.
  std::vector<SilenceReport> r = {{1, 0, ""}, {0, 3, ""}, {3, 2, ""}};
  EXPECT_EQ(silent_rank(r, {}, 4), 2);
  EXPECT_EQ(silent_rank({{3, 2, ""}, {1, 0, ""}}, {}, 4), 2);
}

TEST(Blame, AReporterOrAnEndedRankIsNeverBlamedWhenAnotherIsSilent) {
  // Rank 1 timed out naming 0; rank 0 then failed on 1's closed connection and exited:
  // rank 2, the one that neither spoke nor ended, stalled the ring.
  EXPECT_EQ(silent_rank({{1, 0, ""}}, {0}, 3), 2);
  // Two ranks silent and none named: the first report's peer.
  EXPECT_EQ(silent_rank({{1, 0, ""}}, {0}, 4), 0);
  // Only the stopped rank's right neighbour timed out: it named the right one.
  EXPECT_EQ(silent_rank({{3, 2, ""}}, {}, 4), 2);
}

TEST(Blame, AccountedOnceAllButOneRankHaveSpoken) {
  EXPECT_FALSE(silence_accounted({{1, 0, ""}}, {}, 4));
  EXPECT_FALSE(silence_accounted({{1, 0, ""}, {0, 3, ""}}, {}, 4));
  EXPECT_TRUE(silence_accounted({{1, 0, ""}, {0, 3, ""}}, {3}, 4));
  EXPECT_TRUE(silence_accounted({{1, 0, ""}}, {}, 2));
}

TEST(Blame, APeerThatExitedZeroUnderAFailedRankIsTheCause) {
  // Rank 4 exited 0 mid-collective; rank 0 failed on its closed connection, rank 1 on 0's.
  auto v = lost_peer_culprit({{0, 4}, {1, 0}}, {0, 1}, {4}, {4}, false);
  ASSERT_TRUE(v.culprit.has_value());
  EXPECT_EQ(*v.culprit, 4);
  EXPECT_FALSE(v.pending);
}

TEST(Blame, ALostPeerNotYetHeardOfKeepsTheVerdictPending) {
  auto v = lost_peer_culprit({{0, 4}}, {0}, {}, {}, false);
  EXPECT_FALSE(v.culprit.has_value());
  EXPECT_TRUE(v.pending);
  // It left (its rendezvous connection ended) but its host has not said how it ended.
  v = lost_peer_culprit({{0, 4}}, {0}, {4}, {}, false);
  EXPECT_FALSE(v.culprit.has_value());
  EXPECT_TRUE(v.pending);
  // Its exit 0 is in but not whether it said hvd_shutdown first.
  v = lost_peer_culprit({{0, 4}}, {0}, {}, {4}, false);
  EXPECT_TRUE(v.pending);
}

TEST(Blame, OnceNoMoreCanComeHavingLeftIsEnough) {
  auto v = lost_peer_culprit({{0, 4}}, {0}, {4}, {}, true);
  ASSERT_TRUE(v.culprit.has_value());
  EXPECT_EQ(*v.culprit, 4);
  // A peer that exited 0 after hvd_shutdown never left: nobody is named by this rule.
  v = lost_peer_culprit({{0, 4}}, {0}, {}, {4}, true);
  EXPECT_FALSE(v.culprit.has_value());
}

TEST(Blame, ALostPeerThatFailedItselfIsNoCulpritHere) {
  // Rank 4 exited 3 (or was killed): the usual rules weigh its failure with rank 0's.
  auto v = lost_peer_culprit({{0, 4}}, {0, 4}, {4}, {}, false);
  EXPECT_FALSE(v.culprit.has_value());
  EXPECT_FALSE(v.pending);
  // Failed ranks that lost no peer (a timed-out or crashed rank) name nobody.
  v = lost_peer_culprit({}, {0, 2}, {1}, {1}, false);
  EXPECT_FALSE(v.culprit.has_value());
  EXPECT_FALSE(v.pending);
}

TEST(Blame, TheLowestFailedRanksLostPeerIsNamedFirst) {
  auto v = lost_peer_culprit({{2, 5}, {0, 3}}, {0, 2}, {3, 5}, {3, 5}, false);
  ASSERT_TRUE(v.culprit.has_value());
  EXPECT_EQ(*v.culprit, 3);
}

TEST(Blame, TheChainOfLostPeersIsFollowedToWhereItBegan) {
  // Rank 5 crashed (its report not in yet); rank 3 failed on it, caught the error and
  // exited 0 without hvd_shutdown; rank 1 failed on rank 3's closed connection. Rank 3 is
  // not the cause: the verdict waits for rank 5's end.
  auto v = lost_peer_culprit({{1, 3}, {3, 5}}, {1}, {3}, {3}, false);
  EXPECT_FALSE(v.culprit.has_value());
  EXPECT_TRUE(v.pending);
  // Rank 5's failure arrives: the usual rules weigh it; nobody is named by this one.
  v = lost_peer_culprit({{1, 3}, {3, 5}}, {1, 5}, {3, 5}, {3}, false);
  EXPECT_FALSE(v.culprit.has_value());
  EXPECT_FALSE(v.pending);
  // Rank 5 had exited 0 without hvd_shutdown: it is the one.
  v = lost_peer_culprit({{1, 3}, {3, 5}}, {1}, {3, 5}, {3, 5}, false);
  ASSERT_TRUE(v.culprit.has_value());
  EXPECT_EQ(*v.culprit, 5);
  // Ranks that name each other (both failed on the other's closed connection) end the walk.
  v = lost_peer_culprit({{1, 2}, {2, 1}}, {1}, {2}, {2}, false);
  EXPECT_FALSE(v.culprit.has_value());
  EXPECT_FALSE(v.pending);
}
