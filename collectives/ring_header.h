// What the ring's communicator and its algorithms share: the header every rank compares
// with its peers before a collective, and how a buffer is cut into chunks.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include "collectives/dtype.h"
#include "collectives/ring_comm.h"

namespace hvdrun {

namespace ring_detail {

enum Kind : uint8_t { kAllreduce = 1, kBroadcast = 2, kAllgather = 3, kBarrier = 4, kReducescatter = 5 };

inline const char* kind_name(uint8_t k) {
  switch (k) {
    case kAllreduce: return "allreduce";
    case kBroadcast: return "broadcast";
    case kAllgather: return "allgather";
    case kBarrier: return "barrier";
    case kReducescatter: return "reducescatter";
  }
  return "?";
}

inline int mod(int a, int n) { return ((a % n) + n) % n; }

// Chunk c of n of a buffer of `count` elements starts at element chunk_offset(count, n, c)
// (the first count % n chunks are one element longer).
inline size_t chunk_offset(size_t count, int n, int c) { return (count / n) * c + std::min<size_t>(c, count % n); }

}  // namespace ring_detail

using ring_detail::chunk_offset;
using ring_detail::kAllgather;
using ring_detail::kAllreduce;
using ring_detail::kBarrier;
using ring_detail::kBroadcast;
using ring_detail::kind_name;
using ring_detail::kReducescatter;
using ring_detail::mod;

struct RingComm::Header {
  uint64_t seq;
  uint64_t count;
  int32_t root;
  uint8_t kind, dtype, op, pad;
  bool operator==(const Header& o) const {
    return seq == o.seq && count == o.count && root == o.root && kind == o.kind && dtype == o.dtype && op == o.op;
  }
  std::string describe() const {
    // A reducescatter's count is its rows, and root its row_elems (the rows' split depends on both).
    std::string s = std::string(ring_detail::kind_name(kind)) +
                    (kind == kReducescatter ? "(rows=" + std::to_string(count) + ", row_elems=" + std::to_string(root)
                                            : "(count=" + std::to_string(count));
    if (kind != kBarrier) s += std::string(", ") + dtype_name(static_cast<hvd_dtype_t>(dtype));
    if (kind == kAllreduce || kind == kReducescatter) s += std::string(", ") + op_name(static_cast<hvd_op_t>(op));
    if (kind == kBroadcast) s += ", root=" + std::to_string(root);
    return s + ") #" + std::to_string(seq);
  }
};

}  // namespace hvdrun
