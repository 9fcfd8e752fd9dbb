#include "collectives/process_sets.h"

#include <algorithm>

namespace hvdrun {

Result<std::vector<int>> process_set_ranks(const int* ranks, int n, int size) {
  if (n < 1 || !ranks)
    return make_error(ErrorKind::kInvalidArgument, "a process set needs at least one rank (n = " + std::to_string(n) + ")");
  std::vector<int> out(ranks, ranks + n);
  std::sort(out.begin(), out.end());
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] < 0 || out[i] >= size)
      return make_error(ErrorKind::kInvalidArgument, "process set rank " + std::to_string(out[i]) +
                                                         " is not a rank of this job (0.." + std::to_string(size - 1) + ")");
    if (i && out[i] == out[i - 1])
      return make_error(ErrorKind::kInvalidArgument, "process set rank " + std::to_string(out[i]) + " is given twice");
  }
  return out;
}

std::string ranks_text(const std::vector<int>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? "," : "") + std::to_string(ranks[i]);
  return s;
}

}  // namespace hvdrun
