#include "collectives/engine/stall_inspector.h"

#include <algorithm>

namespace hvdrun {

void StallInspector::note(double age, StallReport* r) const {
  if (shutdown_s_ > 0 && age >= shutdown_s_) r->fatal = true;
}

std::optional<StallReport> StallInspector::check(double now, const Negotiation& negotiation,
                                                 const ResponseCache& cache) {
  if (now - last_check_ < std::min(1.0, check_s_ / 4)) return std::nullopt;
  last_check_ = now;
  StallReport report;
  bool any = false;
  for (auto& [name, e] : negotiation.table()) {
    double age = now - e.first;
    if (age < check_s_) continue;
    any = true;
    note(age, &report);
    for (int r = 0; r < static_cast<int>(e.per_rank.size()); ++r)
      if (!e.per_rank[r] && !negotiation.joined(r)) report.missing[r].push_back(name);
  }
  for (auto& [name, p] : negotiation.cached_partial()) {
    double age = now - p.first;
    if (age < check_s_ || !cache.contains(name)) continue;
    any = true;
    note(age, &report);
    for (int r : p.second) report.missing[r].push_back(name);
  }
  if (!any) {
    warned_ = false;
    return std::nullopt;
  }
  // Rank 0 warns; any rank ends a job stalled past the shutdown time (rank 0 may be the
  // rank that stalled it: stopped, or hung in the program).
  if ((rank_ != 0 || warned_) && !report.fatal) return std::nullopt;
  warned_ = true;
  return report;
}

std::string format_stall(const StallReport& report, const std::function<std::string(int rank)>& host_of) {
  std::string out;
  for (auto& [r, names] : report.missing) {
    out += "rank " + std::to_string(r);
    if (std::string host = host_of ? host_of(r) : ""; !host.empty()) out += " (host " + host + ")";
    out += " has not submitted:";
    size_t shown = 0;
    for (auto& nm : names) {
      if (shown++ == 6) {
        out += " ... (" + std::to_string(names.size()) + " in all)";
        break;
      }
      out += " " + nm;
    }
    out += "\n";
  }
  return out;
}

}  // namespace hvdrun
