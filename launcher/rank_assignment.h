// Horovod's rank assignment: hosts in order, slots in order, stop at np.
#pragma once

#include <string>
#include <vector>

#include "common/result.h"
#include "launcher/hosts.h"

namespace hvdrun {

struct RankInfo {
  int rank = 0, size = 0;
  int local_rank = 0, local_size = 0;
  int cross_rank = 0, cross_size = 0;
  int host_index = 0;  // index into the host list
  std::string host;
  bool operator==(const RankInfo&) const = default;
};

// np <= 0 means "every slot". More ranks than slots is an error naming both numbers.
Result<std::vector<RankInfo>> assign_ranks(const std::vector<HostSlots>& hosts, int np);

}  // namespace hvdrun
