// Elastic membership (pure): which workers form the next round, and with which ranks. A
// worker is a slot, (host, local slot index), as Horovod's (HOROVOD_HOSTNAME, local_rank):
// a slot in both rounds keeps its process (the same PID), only new slots are spawned, and
// the processes of slots no longer in the job are told they were removed.
//
// Ranks follow the hosts' order: the hosts of the current round in their order, then new
// hosts in the order of the discovery script's lines (Horovod appends them in no fixed
// order); on each host its slots in order; at most max_np ranks.
#pragma once

#include <string>
#include <vector>

#include "launcher/hosts.h"
#include "launcher/rank_assignment.h"

namespace hvdrun {

struct ElasticSlot {
  std::string host;
  int index = 0;  // 0 .. slots-1 on its host
  bool operator==(const ElasticSlot&) const = default;
  bool operator<(const ElasticSlot& o) const { return host != o.host ? host < o.host : index < o.index; }
};

struct ElasticRound {
  std::vector<ElasticSlot> slots;  // by rank: slots[r] is rank r's
  std::vector<RankInfo> ranks;     // rank r's numbers (rank, size, local_*, cross_*, host)
  std::vector<ElasticSlot> kept;     // in both rounds (their processes go on), by new rank
  std::vector<ElasticSlot> spawned;  // new (their processes are started), by new rank
  std::vector<ElasticSlot> removed;  // in the current round only (told HVD_ERR_REMOVED), by old rank
};

// The next round from the current one's slots (by rank; empty for the first round), the
// hosts available now (discovery's order, blacklisted hosts already left out) and max_np
// (0: unbounded).
ElasticRound next_round(const std::vector<ElasticSlot>& current, const std::vector<HostSlots>& available, int max_np);

// The hosts in rank order: those of `current` first (in the order of their first slot),
// then the others of `available` in their order; only hosts of `available`, each with its
// available slot count.
std::vector<HostSlots> host_order(const std::vector<ElasticSlot>& current, const std::vector<HostSlots>& available);

}  // namespace hvdrun
