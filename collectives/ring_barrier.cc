// Ring barrier.
#include <cstring>

#include "collectives/dtype.h"
#include "collectives/ring.h"
#include "collectives/ring_header.h"

namespace hvdrun {

Status Ring::barrier() {
  if (auto s = check_agreement(Header{seq_++, 0, -1, kBarrier, 0, 0, 0}); !s) return s;
  // The header exchange proves the left neighbour arrived; n-1 more token passes prove all did.
  char token = 0, got = 0;
  for (int s = 0; s < size_ - 2; ++s)
    if (auto st = step(&token, 1, &got, 1, false); !st) return st;
  return {};
}

}  // namespace hvdrun
