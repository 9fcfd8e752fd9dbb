// An elastic round's store keys, the update announcing it, a spawned worker's variables
// and the one line per reset.
#include "launcher/elastic_round.h"

#include <gtest/gtest.h>

namespace hvdrun {
namespace {

TEST(ElasticRound, KeysUpdatesEnvironmentAndTheResetLine) {
  ElasticRound r = next_round({{"a", 0}, {"b", 0}}, {{"a", 1}, {"c", 1}}, 0);
  EXPECT_EQ(round_keys(2, r), (StoreEntries{{"hvdrun/elastic/round/2/slot/a:0", "0 2 0 1 0 2"},
                                            {"hvdrun/elastic/round/2/slot/c:0", "1 2 0 1 1 2"},
                                            {"hvdrun/elastic/round/2/slot/b:0", "removed"},
                                            {"hvdrun/elastic/round", "2"}}));
  RoundChange c = round_change(r, false, 1);
  EXPECT_EQ(c.kinds, 3);
  EXPECT_EQ(c.ended_round, 1);  // b's worker was removed: round 1 cannot go on
  EXPECT_EQ(update_entry(4, c), std::make_pair(std::string("hvdrun/elastic/update/4"), std::string("3 1")));
  EXPECT_EQ(round_change(next_round({{"a", 0}}, {{"a", 1}, {"c", 1}}, 0), false, 1).ended_round, 0);
  EXPECT_EQ(elastic_worker_env(2, {"c", 0}),
            (std::vector<std::string>{"HVDRUN_ELASTIC=1", "HOROVOD_ELASTIC=1", "HVDRUN_ELASTIC_ROUND=2",
                                      "HVDRUN_ELASTIC_SLOT=c:0"}));
  ResetFacts f{3, "host h2 failed (rank(s) 2,3 killed)", {{"h2", 20.0}, {"h3", std::nullopt}}, 4, 2, {}, "", 0.84};
  EXPECT_EQ(reset_line(f), "reset 3: host h2 failed (rank(s) 2,3 killed), host h2 blacklisted for 20 s, host h3 "
                           "blacklisted for good; size 4 -> 2; 0.8 s");
  // Issue 28 item 7: the commit the new round starts from, or why none is named.
  f.commit = 17;
  f.no_commit = "no commit reported in 30 s";  // (a commit wins)
  EXPECT_EQ(reset_line(f), "reset 3: host h2 failed (rank(s) 2,3 killed), host h2 blacklisted for 20 s, host h3 "
                           "blacklisted for good; size 4 -> 2; restored commit 17; 0.8 s");
  f.commit.reset();
  f.blacklisted.clear();
  f.seconds = 12.3;
  EXPECT_EQ(reset_line(f), "reset 3: host h2 failed (rank(s) 2,3 killed); size 4 -> 2; no commit reported in 30 s; 12 s");
}

}  // namespace
}  // namespace hvdrun
