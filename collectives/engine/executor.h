// The executor (Horovod's operations): runs one agreed response on the ring or the device,
// one function per kind, and reduces the data that came eagerly with the messages. It
// writes the request's outputs; the engine completes it.
#pragma once

#include <vector>

#include "collectives/engine/negotiation.h"
#include "collectives/engine/pending_op.h"

namespace hvdrun {

class Ring;
class GpuCollectives;

class Executor {
 public:
  Executor(Ring* ring, int rank, int size) : ring_(ring), rank_(rank), size_(size) {}
  // `op`: this rank's request, null on a rank that has joined (it contributes zeros to an
  // allreduce); `gpu`: the device collectives for a device response, else null.
  Status run(const Response& r, PendingOp* op, GpuCollectives* gpu);
  // Every rank's (prescaled) data of a host allreduce, in rank order: reduced into op's
  // buffers with the postscale (and 1/size for an average).
  void reduce_eager(const Spec& sp, const std::vector<const char*>& data, PendingOp& op);

 private:
  Status allreduce(const Spec& s, PendingOp* op, GpuCollectives* gpu);
  Status allreduce_host(const Spec& s, size_t k, PendingOp* op);
  Status broadcast(const Spec& s, PendingOp* op, GpuCollectives* gpu);
  Status allgatherv(const Response& r, PendingOp* op, GpuCollectives* gpu);
  Status alltoall(const Response& r, PendingOp* op, GpuCollectives* gpu);
  Status reducescatter(const Spec& s, PendingOp* op, GpuCollectives* gpu);

  Ring* ring_;
  int rank_, size_;
  std::vector<char> zeros_;      // a joined rank's contribution
  std::vector<char> eager_acc_;  // reduce_eager's accumulator (kept: it keeps its capacity)
};

}  // namespace hvdrun
