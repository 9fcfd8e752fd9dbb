#include "collectives/engine/executor.h"

#include <cstring>

#include "collectives/dtype.h"
#include "collectives/gpu.h"
#include "collectives/reduce_kernels.h"
#include "collectives/ring.h"

namespace hvdrun {

Status Executor::run(const Response& r, PendingOp* op, GpuCollectives* gpu) {
  const Spec& s = r.spec;
  switch (s.kind) {
    case OpKind::kAllreduce: return allreduce(s, op, gpu);
    case OpKind::kBroadcast: return broadcast(s, op, gpu);
    case OpKind::kBarrier: return ring_->barrier();
    case OpKind::kAllgatherv: return allgatherv(r, op, gpu);
    case OpKind::kAlltoall: return alltoall(r, op, gpu);
    case OpKind::kReducescatter: return reducescatter(s, op, gpu);
    case OpKind::kJoin: break;
  }
  return make_error(ErrorKind::kInternal, "internal: unexpected response kind");
}

Status Executor::allreduce(const Spec& s, PendingOp* op, GpuCollectives* gpu) {
  for (size_t k = 0; k < s.counts.size(); ++k) {
    if (gpu) {
      const hvd_dtype_t dtype = s.dtype_at(k);  // (a group of several dtypes: each its own)
      if (auto st = gpu->allreduce_scaled(op->req.tensors[k].send, op->req.tensors[k].recv, s.counts[k], dtype,
                                          static_cast<hvd_op_t>(s.op), s.prescale, s.postscale);
          !st)
        return st;
      continue;
    }
    if (auto st = allreduce_host(s, k, op); !st) return st;
  }
  return {};
}

// Tensor k of a host allreduce, with its scales.
Status Executor::allreduce_host(const Spec& s, size_t k, PendingOp* op) {
  const size_t count = s.counts[k];
  const hvd_dtype_t dtype = s.dtype_at(k);  // (a group of several dtypes: each its own)
  const void* send = op ? op->req.tensors[k].send : nullptr;
  void* recv = op ? op->req.tensors[k].recv : nullptr;
  if (!op) {  // joined: contribute zeros
    zeros_.assign(count * dtype_size(dtype), 0);
    send = recv = zeros_.data();
  }
  if (s.prescale == 1 && s.postscale == 1) return ring_->allreduce(send, recv, count, dtype, static_cast<hvd_op_t>(s.op));
  scale_copy(recv, send, count, dtype, s.prescale, 1);
  if (auto st = ring_->allreduce(recv, recv, count, dtype, wire_op(s)); !st) return st;
  scale_copy(recv, recv, count, dtype, s.postscale, s.op == HVD_OP_AVERAGE ? size_ : 1);
  return {};
}

Status Executor::broadcast(const Spec& s, PendingOp* op, GpuCollectives* gpu) {
  const auto dtype = static_cast<hvd_dtype_t>(s.dtype);
  if (gpu) return gpu->broadcast(op->req.tensors[0].recv, s.counts[0], dtype, s.root);
  return ring_->broadcast(op->req.tensors[0].recv, s.counts[0], dtype, s.root);
}

Status Executor::allgatherv(const Response& r, PendingOp* op, GpuCollectives* gpu) {
  const Spec& s = r.spec;
  const int n = size_;
  const size_t es = dtype_size(static_cast<hvd_dtype_t>(s.dtype));
  std::vector<size_t> bytes(n);
  size_t total = 0;
  op->rows_per_rank.assign(n, 0);
  for (int p = 0; p < n; ++p) {
    op->rows_per_rank[p] = r.per_rank[p].counts[0];
    bytes[p] = r.per_rank[p].counts[0] * s.row_elems * es;
    total += bytes[p];
  }
  void* out = op->req.tensors[0].recv;
  if (gpu) {
    if (!out) op->output.resize(total);
    return gpu->allgatherv(op->req.tensors[0].send, out, bytes, out ? nullptr : &op->output);
  }
  if (!out) {
    op->output.resize(total);
    out = op->output.data();
  }
  return ring_->allgatherv(op->req.tensors[0].send, out, bytes);
}

Status Executor::alltoall(const Response& r, PendingOp* op, GpuCollectives* gpu) {
  const Spec& s = r.spec;
  const int n = size_, me = rank_;
  const size_t es = dtype_size(static_cast<hvd_dtype_t>(s.dtype));
  std::vector<size_t> bytes(static_cast<size_t>(n) * n);
  size_t total = 0;
  op->rows_per_rank.assign(n, 0);
  for (int src = 0; src < n; ++src)
    for (int dst = 0; dst < n; ++dst) {
      bytes[static_cast<size_t>(src) * n + dst] = r.per_rank[src].splits[dst] * s.row_elems * es;
      if (dst == me) {
        op->rows_per_rank[src] = r.per_rank[src].splits[dst];
        total += bytes[static_cast<size_t>(src) * n + dst];
      }
    }
  if (gpu) return gpu->alltoallv(op->req.tensors[0].send, bytes, me, &op->output);
  op->output.resize(total);
  return ring_->alltoallv(op->req.tensors[0].send, op->output.data(), bytes);
}

Status Executor::reducescatter(const Spec& s, PendingOp* op, GpuCollectives* gpu) {
  const auto dtype = static_cast<hvd_dtype_t>(s.dtype);
  const int n = size_, me = rank_;
  const size_t rows = s.counts[0], row = s.row_elems;
  if (gpu) {
    auto share = [&](int p) { return rows / n + (static_cast<size_t>(p) < rows % n ? 1 : 0); };
    size_t first = 0;
    for (int p = 0; p < me; ++p) first += share(p);
    return gpu->reducescatter(op->req.tensors[0].send, op->req.tensors[0].recv, rows * row, first * row,
                              share(me) * row, dtype, static_cast<hvd_op_t>(s.op));
  }
  return ring_->reducescatter(op->req.tensors[0].send, op->req.tensors[0].recv, rows, row, dtype,
                              static_cast<hvd_op_t>(s.op));
}

void Executor::reduce_eager(const Spec& sp, const std::vector<const char*>& data, PendingOp& op) {
  const int n = size_;
  const auto dt = static_cast<hvd_dtype_t>(sp.dtype);
  const size_t es = dtype_size(dt);
  size_t total = 0;
  for (auto c : sp.counts) total += c;
  const hvd_op_t rop = wire_op(sp);
  const double div = sp.op == HVD_OP_AVERAGE ? n : 1;
  if (sp.counts.size() == 1 && sp.postscale == 1 && div == 1) {
    // One tensor, nothing to scale: reduce straight into the caller's buffer (its data
    // went into this rank's message, so an in-place call loses nothing).
    void* recv = op.req.tensors[0].recv;
    if (n == 1)
      std::memcpy(recv, data[0], total * es);
    else
      reduce_pair(recv, data[0], data[1], total, dt, rop);
    for (int r = 2; r < n; ++r) reduce_into(recv, data[r], total, dt, rop);
    return;
  }
  eager_acc_.assign(data[0], data[0] + total * es);
  for (int r = 1; r < n; ++r) reduce_into(eager_acc_.data(), data[r], total, dt, rop);
  size_t off = 0;
  for (size_t k = 0; k < sp.counts.size(); ++k) {
    scale_copy(op.req.tensors[k].recv, eager_acc_.data() + off, sp.counts[k], dt, sp.postscale, div);
    off += sp.counts[k] * es;
  }
}

}  // namespace hvdrun
