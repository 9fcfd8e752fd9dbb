// What a rank announces for a named collective (Spec), and the kinds of collective. Shared
// by the cycle message codec, negotiation, the response cache and the executor.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hvdrun/hvdrun.h"

namespace hvdrun {

enum class OpKind : uint8_t {
  kAllreduce = 1,  // also grouped: several tensors under one name
  kBroadcast = 2,
  kAllgatherv = 3,
  kAlltoall = 4,
  kReducescatter = 5,
  kBarrier = 6,
  kJoin = 7,
};
const char* op_kind_name(OpKind k);
// Kinds whose counts are rows that differ from rank to rank.
inline bool per_rank_rows(OpKind k) { return k == OpKind::kAllgatherv || k == OpKind::kAlltoall; }
// Kinds whose agreed spec the response cache keeps.
inline bool cacheable(OpKind k) {
  return k == OpKind::kAllreduce || k == OpKind::kBroadcast || k == OpKind::kReducescatter;
}

// What a rank announces for a name: every field must agree across ranks except the
// per-rank ones (allgatherv's rows, alltoall's rows and splits).
struct Spec {
  std::string name;
  OpKind kind = OpKind::kAllreduce;
  uint8_t dtype = HVD_FLOAT32, op = HVD_OP_SUM;
  int32_t root = -1;
  double prescale = 1, postscale = 1;
  bool device = false;
  std::vector<uint64_t> counts;  // elements per tensor; rows for the row-shaped kinds
  uint64_t row_elems = 0;
  std::vector<uint64_t> splits;  // alltoall: rows to each rank
  // A grouped allreduce of several dtypes: each tensor's (empty: every tensor is `dtype`).
  // Such a group is neither eager nor fused: each tensor runs on the ring in its dtype.
  std::vector<uint8_t> dtypes;
  // Each tensor's shape, when the caller gave them (hvd_next_call): its number of
  // dimensions, then the dimensions, tensor after tensor. Empty: not given (counts only).
  std::vector<int64_t> shapes;
  hvd_dtype_t dtype_at(size_t k) const { return static_cast<hvd_dtype_t>(dtypes.empty() ? dtype : dtypes[k]); }
  // Stands for a submission that its rank refused (the name was pending there): whatever
  // the other ranks pair with it fails too (Engine::submit).
  bool refused = false;
  bool same_as(const Spec& o) const;  // every agreed field
};

// Whether s.shapes is empty or one well-formed shape per tensor (a peer's message is checked).
bool shapes_well_formed(const Spec& s);
// Whether one of s's tensors has no dimension (a 0-d tensor: shape []).
bool has_zero_dim(const Spec& s);
// s.shapes as "[17,1311]" ("[2,3] [4]" for a group), without each first dimension when
// `skip_first` (the row-shaped kinds, whose first dimensions differ); a call described by no
// shapes holds one-dimensional tensors: "[count]", or "[]" past the first dimension.
std::string shapes_label(const Spec& s, bool skip_first);

// The reduction a spec's data goes through on the wire: an average reduces as a sum (the
// division comes after).
inline hvd_op_t wire_op(const Spec& s) {
  return static_cast<hvd_op_t>(s.op == HVD_OP_AVERAGE ? static_cast<uint8_t>(HVD_OP_SUM) : s.op);
}

struct TensorArg {
  const void* send = nullptr;
  void* recv = nullptr;
};

struct Request {
  Spec spec;
  std::vector<TensorArg> tensors;  // one per count (broadcast: send == recv)
};

}  // namespace hvdrun
