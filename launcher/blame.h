// Who made the job stall (pure): ranks whose collectives made no progress within
// HVDRUN_TIMEOUT each name the neighbour they waited on; in a ring every live rank waits
// on its left neighbour, so most of them name an innocent rank that was itself waiting.
// The rank that stalled the ring is the one that cannot report: stopped (SIGSTOP, a paused
// VM) or hung.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace hvdrun {

struct SilenceReport {
  int rank = -1;        // the rank that timed out
  int peer = -1;        // the rank it made no progress with
  std::string message;  // its report, for hvdrun's line
};

// The rank to blame, given the reports in arrival order (not empty), the ranks that ended
// meanwhile (exited, failed or left: alive enough to end), and the job's size. A named
// rank that neither reported nor ended comes first (named by the earliest report); else
// the one rank that neither reported nor ended, if there is exactly one; else the first
// report's peer.
int silent_rank(const std::vector<SilenceReport>& reports, const std::set<int>& ended, int size);

// Whether every rank but at most one has reported or ended: no more reports can come.
bool silence_accounted(const std::vector<SilenceReport>& reports, const std::set<int>& ended, int size);

// Whose closed connections made ranks fail (pure). A rank that failed on a closed
// connection says which peer it lost (`lost`: rank -> peer), followed to the peer that lost
// none (where the closed connections began). A lost peer that did not fail
// but left the job (its rendezvous connection ended without hvd_shutdown: `left`) is the
// cause: the first such peer, named by the lowest failed rank. Its host's report of how it
// ended (`exited_0`, or a failure) may still be on its way: until both are in, the verdict
// is `pending`, unless `final` (no more waiting): then having left is enough.
struct LostPeerVerdict {
  std::optional<int> culprit;
  bool pending = false;
};
LostPeerVerdict lost_peer_culprit(const std::map<int, int>& lost, const std::set<int>& failed,
                                  const std::set<int>& left, const std::set<int>& exited_0, bool final);

}  // namespace hvdrun
