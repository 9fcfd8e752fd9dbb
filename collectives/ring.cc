// Ring collectives.
//
// Terms. n ranks sit on a ring; each sends only to its right neighbour (rank + 1) and
// receives only from its left (rank - 1), both at once. A buffer of `count` elements is cut
// into n *chunks* (chunk c is the c-th n-th of the buffer, the first ones one element longer
// when count % n != 0). Data moves in *steps*: in one step every rank sends one chunk and
// receives one chunk. Within a step the bytes arrive in *segments* (HVDRUN_SEGMENT_BYTES),
// each reduced as soon as it has arrived, while the rest is still on the wire: sending,
// receiving and reducing overlap.
//
// The algorithms, one file each, are listed in ring.h; the communicator they run over
// (pairs, header agreement, failure, the engine's idle wait) is ring_comm.cc.
#include "collectives/ring.h"

namespace hvdrun {

void Ring::set_hierarchy(std::unique_ptr<Ring> local, std::unique_ptr<Ring> cross, std::vector<int> rank_of,
                         HierarchyOptions which) {
  local_ = std::move(local);
  cross_ = std::move(cross);
  rank_of_ = std::move(rank_of);
  hier_ = which;
}

void Ring::close(const std::string& reason) {
  RingComm::close(reason);
  if (local_) local_->close(reason);
  if (cross_) cross_->close(reason);
  if (group_) group_->close(reason);
}

void Ring::interrupt() {
  RingComm::interrupt();
  if (local_) local_->interrupt();
  if (cross_) cross_->interrupt();
  if (group_) group_->close("the elastic round is over");
}

}  // namespace hvdrun
