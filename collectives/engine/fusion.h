// Fusion (Horovod's fusion_buffer_manager): consecutive host allreduces of one dtype and
// reduction go through one buffer and one ring allreduce.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "collectives/engine/negotiation.h"
#include "collectives/engine/pending_op.h"

namespace hvdrun {

class Ring;
class Timeline;

// Moves the fusable allreduces (same dtype and reduction, host memory) of each kind to where
// its first one is, the others keeping their order: every rank reorders the same list the
// same way.
void group_fusable(std::vector<Response>* responses);
// The end of the batch that starts at responses[i] (within HVDRUN_FUSION_THRESHOLD,
// `fusion_bytes`, 0: none), or i when it runs alone.
size_t fusion_batch_end(const std::vector<Response>& responses, size_t i, size_t fusion_bytes);

class FusionBuffer {
 public:
  // Responses [begin, end) through the buffer: each tensor is copied in with its prescale,
  // the buffer reduced once, and each copied out with its postscale (and 1/size for an
  // average), `done` called with its name when its outputs are written. ops[b]: this rank's
  // request of responses[begin + b] (null on a joined rank).
  Status allreduce(Ring* ring, int size, Timeline* timeline, const std::vector<Response>& responses, size_t begin,
                   size_t end, const std::vector<std::shared_ptr<PendingOp>>& ops,
                   const std::function<void(const std::string&)>& done);

 private:
  std::vector<char> buf_;  // at most HVDRUN_FUSION_THRESHOLD
};

}  // namespace hvdrun
