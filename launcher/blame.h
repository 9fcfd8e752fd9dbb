// Who made the job stall (pure): ranks whose collectives made no progress within
// HVDRUN_TIMEOUT each name the neighbour they waited on; in a ring every live rank waits
// on its left neighbour, so most of them name an innocent rank that was itself waiting.
// The rank that stalled the ring is the one that cannot report: stopped (SIGSTOP, a paused
// VM) or hung.
#pragma once

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

}  // namespace hvdrun
