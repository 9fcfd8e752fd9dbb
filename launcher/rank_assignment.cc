#include "launcher/rank_assignment.h"

#include "launcher/exit_status.h"

#include <algorithm>

namespace hvdrun {

Result<std::vector<RankInfo>> assign_ranks(const std::vector<HostSlots>& hosts, int np) {
  // Every count is bounded before anything is planned (2,100 hosts of 1,048,576 slots sum
  // past 2^31: hvdrun must not try to plan that).
  const long long slots = total_slots(hosts);
  if (np > kMaxJobRanks)
    return error_of(ErrorKind::kUsage, "-np " + std::to_string(np) + ": expected at most " + std::to_string(kMaxJobRanks) +
                          " ranks in one job");
  if (np <= 0) {
    if (slots > kMaxJobRanks)
      return error_of(ErrorKind::kUsage, "the hosts have " + std::to_string(slots) + " slots in all, more than the " +
                            std::to_string(kMaxJobRanks) + " ranks one job may have; give -np");
    np = static_cast<int>(slots);
  }
  if (np > slots)
    return error_of(ErrorKind::kUsage, "requested more processes (" + std::to_string(np) + ") than there are available slots (" +
                          std::to_string(slots) + ")");
  std::vector<RankInfo> ranks;
  ranks.reserve(np);
  std::vector<int> local_sizes;  // per host, ranks actually placed there
  for (size_t h = 0; h < hosts.size() && static_cast<int>(ranks.size()) < np; ++h) {
    int placed = std::min(hosts[h].slots, np - static_cast<int>(ranks.size()));
    for (int l = 0; l < placed; ++l) {
      RankInfo r;
      r.rank = static_cast<int>(ranks.size());
      r.size = np;
      r.local_rank = l;
      r.host_index = static_cast<int>(h);
      r.host = hosts[h].host;
      ranks.push_back(r);
    }
    local_sizes.push_back(placed);
  }
  // cross_size[l] = hosts that have a process at local rank l; cross_rank = order among them.
  int max_local = *std::max_element(local_sizes.begin(), local_sizes.end());
  std::vector<int> cross_count(max_local, 0);
  std::vector<std::vector<int>> cross_rank_of(local_sizes.size(), std::vector<int>(max_local, 0));
  for (size_t h = 0; h < local_sizes.size(); ++h)
    for (int l = 0; l < local_sizes[h]; ++l) cross_rank_of[h][l] = cross_count[l]++;
  for (auto& r : ranks) {
    r.local_size = local_sizes[r.host_index];
    r.cross_rank = cross_rank_of[r.host_index][r.local_rank];
    r.cross_size = cross_count[r.local_rank];
  }
  return ranks;
}

}  // namespace hvdrun
