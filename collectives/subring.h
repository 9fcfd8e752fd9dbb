// Rings among some of the job's ranks, connected after hvd_init over the data-plane
// listener: the hierarchy's local and cross rings (hierarchy.h) and each process set's ring
// (process_sets.h).
#pragma once

#include <memory>
#include <string>

#include "collectives/ring.h"
#include "common/result.h"
#include "common/tunables.h"
#include "transport/pair.h"
#include "transport/store.h"

namespace hvdrun {

struct HierarchySetup {
  transport::Store* store = nullptr;  // the rendezvous
  int listen_fd = -1;
  int rank = 0, size = 1;
  transport::PairOptions pairs;
  RingOptions ring;
  double timeout_s = tunable_default("HVDRUN_TIMEOUT");
  // Names this hvd_init's store barriers apart from an earlier one's, which stay done in the
  // rendezvous ("init0", "round3": Runtime::generation()); "" in tests of one set-up.
  std::string generation;
};
using RingSetup = HierarchySetup;

// Every rank of the job calls it at once, in the same order as its other such calls: a
// store barrier named `name` first (so that each listener sees one ring's connections at a
// time), then a member (`index` >= 0 of `size`) connects to global rank `right` while it
// accepts from global rank `left`. Null for a rank that is not a member; a ring of one
// has no pairs. Errors: kRendezvous (the barrier, the addresses), kPeerLost (connecting),
// kReset (elastic: the round is over, lookup_kind).
Result<std::unique_ptr<Ring>> connect_subring(const RingSetup& s, const std::string& name, int index, int size,
                                              int right, int left);

// The kind of a failed address lookup in the store: kReset where this worker's elastic
// round is over (hvd_init then joins the next one), else kRendezvous.
inline ErrorKind lookup_kind(const Error& e) {
  return e.kind == ErrorKind::kReset ? ErrorKind::kReset : ErrorKind::kRendezvous;
}

}  // namespace hvdrun
