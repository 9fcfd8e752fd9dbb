// What the elastic driver writes and says when a round begins (pure): the round's keys in
// the job's store (docs/ELASTIC.md: each slot's numbers, "removed" for the slots it drops,
// then the round's number), the update that announces it, the variables a worker spawned
// into it gets, and the one line per reset (issue 28, item 7).
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "launcher/elastic_membership.h"

namespace hvdrun {

using StoreEntries = std::vector<std::pair<std::string, std::string>>;

// "host:index", as HVDRUN_ELASTIC_SLOT and the slot keys name it.
std::string slot_name(const ElasticSlot& s);

// The keys of round `n` (made by next_round), in the order they are written: every slot's
// "rank size local_rank local_size cross_rank cross_size", "removed" for every slot of the
// round before that this one drops, then hvdrun/elastic/round = n.
StoreEntries round_keys(int n, const ElasticRound& r);

// What a round change is (HVD_HOSTS_ADDED when it spawns slots, HVD_HOSTS_REMOVED when it
// drops some) and the round it ends
// at once: the old one when a worker of it failed or was removed (its survivors stop
// waiting on it), 0 when hosts were only added (the workers find out at their next check).
struct RoundChange {
  int kinds = 0;
  int ended_round = 0;
};
RoundChange round_change(const ElasticRound& r, bool failure, int old_round);

// hvdrun/elastic/update/<seq> = "<kinds> <ended_round>".
std::pair<std::string, std::string> update_entry(long long seq, const RoundChange& c);

// The variables of a worker spawned into round `n` in slot `s` (besides the usual ones).
std::vector<std::string> elastic_worker_env(int n, const ElasticSlot& s);

// One reset: what caused it and what came of it.
struct ResetFacts {
  int number = 0;                 // resets so far, this one included
  std::string cause;              // "host h2 lost (ranks 2,3 killed by SIGKILL)", "hosts added (h3)"
  std::vector<std::pair<std::string, std::optional<double>>> blacklisted;  // host, cooldown (none: for good)
  int old_size = 0, new_size = 0;
  // The commit the new round starts from, as its rank 0 reported it (hvd_elastic_commit);
  // else why none is named ("no commit reported in 30 s"; "": the line says nothing of it).
  std::optional<long long> commit;
  std::string no_commit;
  double seconds = 0;  // from the cause seen to the commit's report, else to the new round's keys written
};
// "reset 3: host h2 lost (ranks 2,3 killed by SIGKILL), blacklisted for 20 s; size 4 -> 2;
// restored commit 17; 0.8 s"
std::string reset_line(const ResetFacts& f);

// When the driver says a reset's line: at once with the commit reported for its round,
// else at the first of the wait's end, the next reset and the job's end (saying so).
constexpr double kCommitReportWait = 30;  // seconds

// The hosts named in `slots`, once each, in order, joined by ','.
std::string hosts_of(const std::vector<ElasticSlot>& slots);

}  // namespace hvdrun
