#include "collectives/engine/spec.h"

namespace hvdrun {

const char* op_kind_name(OpKind k) {
  switch (k) {
    case OpKind::kAllreduce: return "allreduce";
    case OpKind::kBroadcast: return "broadcast";
    case OpKind::kAllgatherv: return "allgather";
    case OpKind::kAlltoall: return "alltoall";
    case OpKind::kReducescatter: return "reducescatter";
    case OpKind::kBarrier: return "barrier";
    case OpKind::kJoin: return "join";
  }
  return "?";
}

bool Spec::same_as(const Spec& o) const {
  return name == o.name && kind == o.kind && dtype == o.dtype && op == o.op && root == o.root &&
         prescale == o.prescale && postscale == o.postscale && device == o.device && counts == o.counts &&
         row_elems == o.row_elems && splits == o.splits && dtypes == o.dtypes;
}

}  // namespace hvdrun
