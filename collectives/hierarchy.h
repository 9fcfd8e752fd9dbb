// The hierarchy of the hierarchical collectives (ring_hierarchical.cc): which ranks share a host, and
// the two extra rings each rank joins (local: this host's ranks; cross: the ranks with this
// local index on every host). Built in hvd_init when HVDRUN_HIERARCHICAL_ALLREDUCE or
// _ALLGATHER (Horovod's HOROVOD_HIERARCHICAL_*, hvdrun --hierarchical-*) asks for it.
#pragma once

#include <string>
#include <vector>

#include "collectives/ring.h"
#include "collectives/subring.h"
#include "common/result.h"
#include "transport/pair.h"
#include "transport/store.h"

namespace hvdrun {

// Pure: the hosts of every rank (index = rank) -> the layout. Hosts are numbered in the
// order of their first rank, local indices in rank order within a host.
struct HostLayout {
  int hosts = 0, per_host = 0;  // per_host: 0 when hosts have different numbers of ranks
  std::vector<int> rank_of;     // [host * per_host + local index] -> rank (when per_host > 0)
  std::vector<int> host_of, local_of;  // [rank]
};
HostLayout host_layout(const std::vector<std::string>& host_of_rank);

// What the variables ask for: "1", "0" or "auto" (on when there are several hosts with
// several ranks on each, the same number on every host), from the HVDRUN_ variable, else
// Horovod's HOROVOD_ one, else auto. An unknown value is an error naming it.
enum class Want { kOff, kOn, kAuto };
struct HierarchyWanted {
  Want allreduce = Want::kAuto, allgather = Want::kAuto;
  bool any() const { return allreduce != Want::kOff || allgather != Want::kOff; }
};
Result<HierarchyWanted> hierarchy_from_tunables();


// Called by every rank of a job on several hosts (all or none must call it): asks the
// store (the rendezvous) for every rank's host, and when the layout has one (several
// hosts, the same number >= 2 of ranks on each) connects the local and the cross ring
// (every rank at once, phase by phase with a store barrier between, so that each listener
// sees one ring's connection at a time) and attaches them to `global`. Hosts with different numbers of
// ranks have no hierarchy: an error when it was asked for explicitly.
Status attach_hierarchy(Ring& global, const HierarchySetup& setup, HierarchyWanted wanted);

}  // namespace hvdrun
