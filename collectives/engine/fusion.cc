#include "collectives/engine/fusion.h"

#include <algorithm>
#include <utility>

#include "collectives/dtype.h"
#include "collectives/reduce_kernels.h"
#include "collectives/ring.h"
#include "collectives/timeline.h"

namespace hvdrun {
namespace {

// A tensor of 256 KiB or more goes alone, in place: its two copies through the fusion
// buffer cost more than its own call (hvdrun-engine-bench, ResNet-50's gradients on 2
// ranks: a step 1.07-1.14x of one fused call with 256 KiB, 1.29-1.30x with 1 MiB over
// shared memory; 1.06x against 1.14x over TCP).
constexpr size_t kFuseBelow = 256 << 10;

bool fusable(const Response& x) {
  return x.status && x.spec.kind == OpKind::kAllreduce && !x.spec.device && x.spec.dtypes.empty();
}

// Fusable responses of one key go together; -1: not fusable.
int fusion_key(const Response& x) { return fusable(x) ? x.spec.dtype * 8 + static_cast<int>(wire_op(x.spec)) : -1; }

size_t bytes_of(const Spec& s) {
  size_t b = 0;
  for (auto c : s.counts) b += c * dtype_size(static_cast<hvd_dtype_t>(s.dtype));
  return b;
}

}  // namespace

void group_fusable(std::vector<Response>* responses) {
  std::vector<int> first_at(256, -1);
  std::vector<std::pair<int, size_t>> order;
  for (size_t i = 0; i < responses->size(); ++i) {
    int k = fusion_key((*responses)[i]);
    int pos = static_cast<int>(i);
    if (k >= 0) {
      if (first_at[k] < 0) first_at[k] = pos;
      pos = first_at[k];
    }
    order.push_back({pos, i});
  }
  std::stable_sort(order.begin(), order.end(), [](auto& a, auto& b) { return a.first < b.first; });
  std::vector<Response> sorted;
  sorted.reserve(responses->size());
  for (auto& [pos, i] : order) sorted.push_back(std::move((*responses)[i]));
  responses->swap(sorted);
}

size_t fusion_batch_end(const std::vector<Response>& responses, size_t i, size_t fusion_bytes) {
  const Response& r = responses[i];
  if (!fusable(r) || fusion_bytes == 0 || bytes_of(r.spec) > fusion_bytes || bytes_of(r.spec) >= kFuseBelow) return i;
  size_t total = bytes_of(r.spec), j = i + 1;
  while (j < responses.size() && fusable(responses[j]) && bytes_of(responses[j].spec) < kFuseBelow &&
         responses[j].spec.dtype == r.spec.dtype && wire_op(responses[j].spec) == wire_op(r.spec) &&
         total + bytes_of(responses[j].spec) <= fusion_bytes) {
    total += bytes_of(responses[j].spec);
    ++j;
  }
  return j;
}

Status FusionBuffer::allreduce(Ring* ring, int size, Timeline* timeline, const std::vector<Response>& responses,
                               size_t begin, size_t end, const std::vector<std::shared_ptr<PendingOp>>& ops,
                               const std::function<void(const std::string&)>& done) {
  const auto dtype = static_cast<hvd_dtype_t>(responses[begin].spec.dtype);
  const size_t es = dtype_size(dtype);
  size_t total = 0;
  for (size_t b = begin; b < end; ++b)
    for (auto c : responses[b].spec.counts) total += c;
  if (buf_.size() < total * es) buf_.resize(total * es);
  size_t off = 0;
  for (size_t b = begin; b < end; ++b) {
    const Spec& s = responses[b].spec;
    if (timeline) timeline->phase(s.name, "MEMCPY_IN_FUSION_BUFFER");
    for (size_t k = 0; k < s.counts.size(); ++k) {
      const void* src = ops[b - begin] ? ops[b - begin]->req.tensors[k].send : nullptr;
      scale_copy(buf_.data() + off, src, s.counts[k], dtype, s.prescale, 1);
      off += s.counts[k] * es;
    }
    if (timeline) timeline->phase(s.name, "ALLREDUCE");
  }
  if (auto st = ring->allreduce(buf_.data(), buf_.data(), total, dtype, wire_op(responses[begin].spec)); !st) return st;
  off = 0;
  for (size_t b = begin; b < end; ++b) {
    const Spec& s = responses[b].spec;
    double div = s.op == HVD_OP_AVERAGE ? size : 1;
    if (timeline) timeline->phase(s.name, "MEMCPY_OUT_FUSION_BUFFER");
    for (size_t k = 0; k < s.counts.size(); ++k) {
      if (ops[b - begin]) scale_copy(ops[b - begin]->req.tensors[k].recv, buf_.data() + off, s.counts[k], dtype, s.postscale, div);
      off += s.counts[k] * es;
    }
    done(s.name);
  }
  return {};
}

}  // namespace hvdrun
