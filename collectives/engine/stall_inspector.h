// The stall inspector (Horovod's stall_inspector): names some ranks announced and others
// not, for longer than HVDRUN_STALL_CHECK_TIME_SECONDS, with the ranks missing. It returns
// rank -> missing names; the engine words the report (format_stall) for hvdrun. Pure: the
// caller passes the time.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "collectives/engine/negotiation.h"
#include "collectives/engine/response_cache.h"

namespace hvdrun {

struct StallReport {
  std::map<int, std::vector<std::string>> missing;  // rank -> the names it has not submitted
  bool fatal = false;  // some name stalled past the shutdown time
};

class StallInspector {
 public:
  // `check_s` > 0; `shutdown_s`: 0 never; `rank`: this rank (rank 0 warns, any rank ends a
  // job stalled past the shutdown time).
  StallInspector(double check_s, double shutdown_s, int rank) : check_s_(check_s), shutdown_s_(shutdown_s), rank_(rank) {}
  // Looks at most every min(1 s, check_s / 4): a report when this rank should make one now
  // (a warning once per stall, then only a fatal one).
  std::optional<StallReport> check(double now, const Negotiation& negotiation, const ResponseCache& cache);

 private:
  void note(double age, StallReport* r) const;

  double check_s_, shutdown_s_;
  int rank_;
  double last_check_ = 0;
  bool warned_ = false;
};

// "rank 1 (host h1) has not submitted: a b\n", one line per rank, at most 6 names each;
// the host from `host_of` (none named where it is unset or answers "").
std::string format_stall(const StallReport& report, const std::function<std::string(int rank)>& host_of);

}  // namespace hvdrun
