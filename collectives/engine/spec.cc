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
         row_elems == o.row_elems && splits == o.splits && dtypes == o.dtypes && shapes == o.shapes;
}

bool shapes_well_formed(const Spec& s) {
  if (s.shapes.empty()) return true;
  size_t at = 0, tensors = 0;
  for (; at < s.shapes.size(); ++tensors) {
    const int64_t nd = s.shapes[at];
    if (nd < 0 || static_cast<uint64_t>(nd) > s.shapes.size() - at - 1) return false;
    at += 1 + static_cast<size_t>(nd);
  }
  return tensors == s.counts.size();
}

bool has_zero_dim(const Spec& s) {
  if (!shapes_well_formed(s)) return false;
  for (size_t at = 0; at < s.shapes.size(); at += 1 + static_cast<size_t>(s.shapes[at]))
    if (s.shapes[at] == 0) return true;
  return false;
}

std::string shapes_label(const Spec& s, bool skip_first) {
  std::string out;
  if (s.shapes.empty()) {  // a call described by no shapes holds tensors of one dimension: [count]
    for (size_t k = 0; k < s.counts.size(); ++k)
      out += (k ? " [" : "[") + (skip_first ? std::string() : std::to_string(s.counts[k])) + "]";
    return out;
  }
  if (!shapes_well_formed(s)) return "unknown";
  for (size_t at = 0; at < s.shapes.size();) {
    const size_t nd = static_cast<size_t>(s.shapes[at]);
    out += (at ? " [" : "[");
    for (size_t d = skip_first ? 1 : 0; d < nd; ++d)
      out += (d > (skip_first ? 1u : 0u) ? "," : "") + std::to_string(s.shapes[at + 1 + d]);
    out += "]";
    at += 1 + nd;
  }
  return out;
}

}  // namespace hvdrun
