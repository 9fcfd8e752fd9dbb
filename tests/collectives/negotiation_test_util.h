// The pure engine parts' tests share these: specs, and a "cluster" of ranks' cycle messages
// run through one Negotiation and its ResponseCache (no ring, no threads, no clock).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "collectives/engine/negotiation.h"
#include "collectives/engine/response_cache.h"

namespace hvdrun::negotiation_test {

inline Spec allreduce(const std::string& name, uint64_t count = 4, hvd_dtype_t dtype = HVD_FLOAT32) {
  Spec s;
  s.name = name;
  s.kind = OpKind::kAllreduce;
  s.dtype = static_cast<uint8_t>(dtype);
  s.op = HVD_OP_SUM;
  s.counts = {count};
  return s;
}

inline Spec of_kind(const std::string& name, OpKind kind) {
  Spec s = allreduce(name);
  s.kind = kind;
  return s;
}

struct Cluster {
  explicit Cluster(int n, size_t capacity = 16) : cache(capacity), neg(n, &cache), msgs(static_cast<size_t>(n)) {}
  // One cycle with the messages as set, then cleared for the next.
  NegotiationResult cycle(double now = 0) {
    NegotiationResult out;
    neg.run(msgs, now, &out);
    for (auto& m : msgs) m = CycleMessage{};
    return out;
  }
  std::vector<std::string> names(const NegotiationResult& out) const {
    std::vector<std::string> v;
    for (auto& r : out.responses) v.push_back(r.name);
    return v;
  }
  ResponseCache cache;
  Negotiation neg;
  std::vector<CycleMessage> msgs;
};

}  // namespace hvdrun::negotiation_test
