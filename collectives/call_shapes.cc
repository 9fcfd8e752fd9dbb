#include "collectives/call_shapes.h"

#include <string>

namespace hvdrun {

namespace {
constexpr int kMaxDims = 32;

Error bad(const char* what, const std::string& m) {
  return make_error(ErrorKind::kInvalidArgument, std::string(what) + ": " + m);
}

// The product of dims [at, at + nd), saturating (a product past 2^64 matches no count).
uint64_t product(const std::vector<int64_t>& v, size_t at, size_t nd) {
  uint64_t p = 1;
  for (size_t d = 0; d < nd; ++d) {
    const auto x = static_cast<uint64_t>(v[at + d]);
    if (x && p > UINT64_MAX / x) return UINT64_MAX;
    p *= x;
  }
  return p;
}
// Whether the shape of nd dimensions at shapes[at + 1] is tensor k's rows of the spec's
// elements per row. A 0-d tensor of allgather or alltoall is one row of one element here: its
// shape goes to the negotiation, which refuses it on every rank (as Horovod's controller does).
bool holds_rows(const std::vector<int64_t>& shapes, size_t at, size_t nd, const Spec& spec, size_t k) {
  if (nd == 0) return per_rank_rows(spec.kind) && spec.counts[k] == 1 && spec.row_elems == 1;
  return static_cast<uint64_t>(shapes[at + 1]) == spec.counts[k] && product(shapes, at + 2, nd - 1) == spec.row_elems;
}
}  // namespace

Result<std::vector<int64_t>> encode_shapes(int ntensors, const int* ndims, const long long* dims) {
  if (ntensors < 0) return bad("hvd_next_call", "ntensors " + std::to_string(ntensors) + " is negative");
  std::vector<int64_t> out;
  if (ntensors == 0) return out;
  if (!ndims) return bad("hvd_next_call", "ndims is null");
  size_t at = 0;
  for (int i = 0; i < ntensors; ++i) {
    if (ndims[i] < 0 || ndims[i] > kMaxDims)
      return bad("hvd_next_call", "tensor " + std::to_string(i) + " has " + std::to_string(ndims[i]) +
                                      " dimensions (0.." + std::to_string(kMaxDims) + ")");
    if (ndims[i] > 0 && !dims) return bad("hvd_next_call", "dims is null");
    out.push_back(ndims[i]);
    for (int d = 0; d < ndims[i]; ++d, ++at) {
      if (dims[at] < 0)
        return bad("hvd_next_call", "tensor " + std::to_string(i) + ": dimension " + std::to_string(d) + " is " +
                                        std::to_string(dims[at]));
      out.push_back(dims[at]);
    }
  }
  return out;
}

Status apply_shapes(const char* what, std::vector<int64_t> shapes, Spec* spec) {
  if (shapes.empty()) return {};
  if (spec->kind == OpKind::kBarrier || spec->kind == OpKind::kJoin) return bad(what, "takes no tensor shapes");
  const bool rows = per_rank_rows(spec->kind) || spec->kind == OpKind::kReducescatter;
  size_t at = 0, k = 0;
  for (; at < shapes.size() && k < spec->counts.size(); ++k) {
    const auto nd = static_cast<size_t>(shapes[at]);
    const std::string which = spec->counts.size() > 1 ? "tensor " + std::to_string(k) + "'s shape" : "the shape";
    if (rows && !holds_rows(shapes, at, nd, *spec, k))
      return bad(what, which + " is not " + std::to_string(spec->counts[k]) + " rows of " +
                           std::to_string(spec->row_elems) + " elements");
    if (!rows && product(shapes, at + 1, nd) != spec->counts[k])
      return bad(what, which + " does not hold its " + std::to_string(spec->counts[k]) + " elements");
    at += 1 + nd;
  }
  if (k != spec->counts.size() || at != shapes.size())
    return bad(what, "shapes for " + std::string(k == spec->counts.size() ? "more" : "fewer") + " tensors than the " +
                         std::to_string(spec->counts.size()) + " it has");
  spec->shapes = std::move(shapes);
  return {};
}

}  // namespace hvdrun
