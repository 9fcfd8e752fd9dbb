// The collective calls of the runtime: their arguments checked, the request submitted to
// the engine (hvd_*_async), the waits on handles, and the blocking calls, each a request
// named by its kind and waited for (Runtime::BlockingName). Set-up and shutdown are in
// runtime.cc.
#include "collectives/runtime.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "collectives/buffer_checks.h"
#include "collectives/dtype.h"
#include "common/strings.h"
#include "common/tunables.h"
#include "hvdrun/hvdrun.h"

namespace hvdrun {

namespace {

Status check_name(const char* what, const char* name) {
  if (!name || !*name) return make_error(ErrorKind::kInvalidArgument,
                                         std::string(what) + ": the name is null or empty");
  return {};
}

Status check_dtype(const char* what, hvd_dtype_t dtype) {
  if (!dtype_valid(dtype)) return make_error(ErrorKind::kInvalidArgument,
                                             std::string(what) + ": invalid dtype " + std::to_string(dtype));
  return {};
}

Status check_op(const char* what, hvd_dtype_t dtype, hvd_op_t op) {
  if (!op_valid(op)) return make_error(ErrorKind::kInvalidArgument,
                                       std::string(what) + ": invalid op " + std::to_string(op));
  if (op == HVD_OP_AVERAGE && !dtype_is_float(dtype))
    return make_error(ErrorKind::kInvalidArgument,
                      std::string(what) + ": average is for floating types, not " + dtype_name(dtype) +
                          " (use sum and divide)");
  return {};
}

}  // namespace

Result<bool> Runtime::on_device(const char* what, const void* a, const void* b) {
  auto ma = memory_of(a);
  if (!ma) return ma.error();
  auto mb = b == a ? ma : memory_of(b);
  if (!mb) return mb.error();
  if (*ma != *mb)
    return make_error(ErrorKind::kInvalidArgument, std::string(what) + ": sendbuf is in " +
                                             (*ma == Memory::kDevice ? "device" : "host") + " memory but recvbuf in " +
                                             (*mb == Memory::kDevice ? "device" : "host") +
                                             " memory (both must be on the same side)");
  return *ma == Memory::kDevice;
}

Result<hvd_handle_t> Runtime::allreduce_async(const char* name, int n, const void* const* sends, void* const* recvs,
                                              const size_t* counts, hvd_dtype_t dtype, hvd_op_t op, double prescale,
                                              double postscale, const char* what, const hvd_dtype_t* dtypes) {
  if (auto s = check_name(what, name); !s) return s.error();
  if (n < 1 || !sends || !recvs || !counts)
    return make_error(ErrorKind::kInvalidArgument,
                      std::string(what) + ": needs at least one tensor (n = " + std::to_string(n) + ")");
  if (dtypes) dtype = dtypes[0];
  for (int i = 0; i < (dtypes ? n : 1); ++i) {
    const hvd_dtype_t t = dtypes ? dtypes[i] : dtype;
    if (auto s = check_dtype(what, t); !s) return s.error();
    if (auto s = check_op(what, t, op); !s) return s.error();
    if ((prescale != 1 || postscale != 1) && !dtype_is_float(t))
      return make_error(ErrorKind::kInvalidArgument,
                        std::string(what) + ": prescale/postscale are for floating types, not " +
                            dtype_name(t));
  }
  if (!std::isfinite(prescale) || !std::isfinite(postscale))
    return make_error(ErrorKind::kInvalidArgument, std::string(what) + ": prescale and postscale must be finite");
  Request r;
  r.spec.name = name;
  r.spec.kind = OpKind::kAllreduce;
  r.spec.dtype = static_cast<uint8_t>(dtype);
  r.spec.op = static_cast<uint8_t>(op);
  r.spec.prescale = prescale;
  r.spec.postscale = postscale;
  bool any_device = false, first = true;
  for (int i = 0; i < n; ++i) {
    if (counts[i] && (!sends[i] || !recvs[i]))
      return make_error(ErrorKind::kInvalidArgument,
                        std::string(what) + ": null buffer (tensor " + std::to_string(i) + ")");
    if (counts[i]) {
      auto dev = on_device(what, sends[i], recvs[i]);
      if (!dev) return dev.error();
      if (!first && *dev != any_device)
        return make_error(ErrorKind::kInvalidArgument, std::string(what) + ": tensors in both host and device memory");
      any_device = *dev;
      first = false;
    }
    r.spec.counts.push_back(counts[i]);
    r.tensors.push_back({sends[i], recvs[i]});
  }
  if (auto s = check_allreduce_buffers(what, n, sends, recvs, counts, dtype, dtypes); !s) return s.error();
  r.spec.device = any_device;
  // Several dtypes: each tensor's (one dtype throughout is the plain group it equals).
  if (dtypes && std::any_of(dtypes, dtypes + n, [&](hvd_dtype_t t) { return t != dtype; }))
    r.spec.dtypes.assign(dtypes, dtypes + n);
  return submit(what, std::move(r));
}

Result<hvd_handle_t> Runtime::broadcast_async(const char* name, void* buf, size_t count, hvd_dtype_t dtype, int root,
                                              const char* what) {
  if (auto s = check_name(what, name); !s) return s.error();
  if (auto s = check_dtype(what, dtype); !s) return s.error();
  int size = view().size;
  if (root < 0 || root >= size)
    return make_error(ErrorKind::kInvalidArgument, std::string(what) + ": root " + std::to_string(root) +
                                             " is not a rank of this job (size " + std::to_string(size) + ")");
  if (count && !buf) return make_error(ErrorKind::kInvalidArgument, std::string(what) + ": null buffer");
  if (auto s = check_broadcast_buffer(what, buf, count, dtype); !s) return s.error();
  Request r;
  r.spec.name = name;
  r.spec.kind = OpKind::kBroadcast;
  r.spec.dtype = static_cast<uint8_t>(dtype);
  r.spec.root = root;
  r.spec.counts = {count};
  if (count) {
    auto dev = on_device(what, buf, buf);
    if (!dev) return dev.error();
    r.spec.device = *dev;
  }
  r.tensors.push_back({buf, buf});
  return submit(what, std::move(r));
}

Result<hvd_handle_t> Runtime::allgatherv_async(const char* name, const void* send, void* recv, size_t rows,
                                               size_t row_elems, hvd_dtype_t dtype, const char* what) {
  if (auto s = check_name(what, name); !s) return s.error();
  if (auto s = check_dtype(what, dtype); !s) return s.error();
  if (rows && row_elems && !send) return make_error(ErrorKind::kInvalidArgument, std::string(what) + ": null buffer");
  const auto [rank, size] = next_call_rank_size();
  if (auto s = check_allgather_buffers(what, send, recv, rows, row_elems, dtype, rank, size); !s) return s.error();
  Request r;
  r.spec.name = name;
  r.spec.kind = OpKind::kAllgatherv;
  r.spec.dtype = static_cast<uint8_t>(dtype);
  r.spec.counts = {rows};
  r.spec.row_elems = row_elems;
  if (rows && row_elems) {
    auto dev = on_device(what, send, recv ? recv : send);
    if (!dev) return dev.error();
    r.spec.device = *dev;
  }
  r.tensors.push_back({send, recv});
  return submit(what, std::move(r));
}

Result<hvd_handle_t> Runtime::alltoall_async(const char* name, const void* send, size_t rows, size_t row_elems,
                                             const size_t* splits, hvd_dtype_t dtype, const char* what) {
  if (auto s = check_name(what, name); !s) return s.error();
  if (auto s = check_dtype(what, dtype); !s) return s.error();
  const int size = next_call_rank_size().second;
  Request r;
  r.spec.name = name;
  r.spec.kind = OpKind::kAlltoall;
  r.spec.dtype = static_cast<uint8_t>(dtype);
  r.spec.counts = {rows};
  r.spec.row_elems = row_elems;
  if (!splits) {
    if (rows % size)
      return make_error(ErrorKind::kInvalidArgument, std::string(what) + ": " + std::to_string(rows) +
                                               " rows do not split equally over " + std::to_string(size) +
                                               " ranks (pass splits)");
    r.spec.splits.assign(size, rows / size);
  } else {
    r.spec.splits.assign(splits, splits + size);
  }
  if (auto s = check_alltoall_buffers(what, send, rows, row_elems, splits, dtype, size); !s) return s.error();
  if (rows && row_elems) {
    if (!send) return make_error(ErrorKind::kInvalidArgument, std::string(what) + ": null buffer");
    auto dev = on_device(what, send, send);
    if (!dev) return dev.error();
    r.spec.device = *dev;
  }
  r.tensors.push_back({send, nullptr});
  return submit(what, std::move(r));
}

Result<hvd_handle_t> Runtime::reducescatter_async(const char* name, const void* send, void* recv, size_t rows,
                                                  size_t row_elems, hvd_dtype_t dtype, hvd_op_t op, const char* what) {
  if (auto s = check_name(what, name); !s) return s.error();
  if (auto s = check_dtype(what, dtype); !s) return s.error();
  if (auto s = check_op(what, dtype, op); !s) return s.error();
  const auto [rank, size] = next_call_rank_size();
  size_t mine = rows / size + (static_cast<size_t>(rank) < rows % size ? 1 : 0);
  if (rows && row_elems && !send) return make_error(ErrorKind::kInvalidArgument, std::string(what) + ": null sendbuf");
  if (mine && row_elems && !recv) return make_error(ErrorKind::kInvalidArgument, std::string(what) + ": null recvbuf");
  if (auto s = check_reducescatter_buffers(what, send, recv, rows, mine, row_elems, dtype); !s) return s.error();
  Request r;
  r.spec.name = name;
  r.spec.kind = OpKind::kReducescatter;
  r.spec.dtype = static_cast<uint8_t>(dtype);
  r.spec.op = static_cast<uint8_t>(op);
  r.spec.counts = {rows};
  r.spec.row_elems = row_elems;
  if (rows && row_elems) {
    auto dev = on_device(what, send, mine ? recv : send);
    if (!dev) return dev.error();
    r.spec.device = *dev;
  }
  r.tensors.push_back({send, recv});
  return submit(what, std::move(r));
}

Result<hvd_handle_t> Runtime::barrier_async(const std::string& name) {
  Request r;
  r.spec.name = name;
  r.spec.kind = OpKind::kBarrier;
  return submit("hvd_barrier", std::move(r));
}

Result<hvd_handle_t> Runtime::join_async() {
  auto e = engine("hvd_join");
  if (!e) return e.error();
  return (*e)->join();
}

int Runtime::poll(hvd_handle_t h) {
  auto e = engine_of(h, "hvd_poll");
  return e ? (*e)->poll(engine_handle(h)) : -1;
}

Status Runtime::wait(hvd_handle_t h) {
  auto e = engine_of(h, "hvd_wait");
  if (!e) return e.error();
  return (*e)->wait(engine_handle(h));
}

Status Runtime::result_rows(hvd_handle_t h, size_t* rows_per_rank) {
  if (!rows_per_rank) return make_error(ErrorKind::kInvalidArgument, "hvd_result_rows: rows_per_rank is null");
  auto e = engine_of(h, "hvd_result_rows");
  if (!e) return e.error();
  std::vector<size_t> rows;
  if (auto s = (*e)->result_rows(engine_handle(h), &rows); !s) return s;
  if (rows.empty()) return make_error(ErrorKind::kInvalidArgument, "hvd_result_rows: handle " + std::to_string(h) +
                                                             " is not an allgatherv or alltoall");
  std::copy(rows.begin(), rows.end(), rows_per_rank);
  return {};
}

Status Runtime::wait_result(hvd_handle_t h, void* recv) {
  auto e = engine_of(h, "hvd_wait_result");
  if (!e) return e.error();
  return (*e)->wait_result(engine_handle(h), recv);
}

Status Runtime::join(int* last_joined_rank) {
  auto e = engine("hvd_join");
  if (!e) return e.error();
  auto h = (*e)->join();
  if (!h) return h.error();
  int last = -1;
  Status w = (*e)->wait_join(*h, &last);
  if (w && last_joined_rank) *last_joined_rank = last;
  return w;
}

Runtime::BlockingName::BlockingName(Runtime& rt, const char* kind) : rt_(rt) {
  std::unique_lock<std::mutex> lk(rt_.blocking_mu_);
  auto it = rt_.blocking_turns_.find(std::string_view(kind));
  if (it == rt_.blocking_turns_.end()) {
    it = rt_.blocking_turns_.try_emplace(kind).first;
    it->second.name = std::string("hvdrun.") + kind;
  }
  turns_ = &it->second;
  const uint64_t ticket = turns_->next++;
  if (ticket != turns_->serving) {
    ++turns_->waiting;
    turns_->cv.wait(lk, [&] { return turns_->serving == ticket; });
    --turns_->waiting;
  }
}

Runtime::BlockingName::~BlockingName() {
  std::lock_guard<std::mutex> lk(rt_.blocking_mu_);
  ++turns_->serving;
  if (turns_->waiting) turns_->cv.notify_all();
}

namespace {
template <class Fn>
Status submit_and_wait(Runtime& rt, const char* kind, Fn&& submit) {
  Runtime::BlockingName name(rt, kind);
  Result<hvd_handle_t> h = [&] {
    Engine::CallerWaits waits;
    return submit(name.name());
  }();
  if (!h) return h.error();
  return rt.wait(*h);
}
}  // namespace

Status Runtime::allreduce(const void* send, void* recv, size_t count, hvd_dtype_t dtype, hvd_op_t op) {
  return submit_and_wait(*this, "allreduce", [&](const std::string& name) {
    return allreduce_async(name.c_str(), 1, &send, &recv, &count, dtype, op, 1, 1, "hvd_allreduce");
  });
}

Status Runtime::broadcast(void* buf, size_t count, hvd_dtype_t dtype, int root) {
  return submit_and_wait(*this, "broadcast", [&](const std::string& name) {
    return broadcast_async(name.c_str(), buf, count, dtype, root, "hvd_broadcast");
  });
}

Status Runtime::allgather(const void* send, void* recv, size_t count, hvd_dtype_t dtype) {
  if (count && !recv) return make_error(ErrorKind::kInvalidArgument, "hvd_allgather: null buffer");
  return submit_and_wait(*this, "allgather", [&](const std::string& name) {
    return allgatherv_async(name.c_str(), send, recv, count, 1, dtype, "hvd_allgather");
  });
}

Status Runtime::barrier() {
  return submit_and_wait(*this, "barrier", [&](const std::string& name) { return barrier_async(name); });
}

}  // namespace hvdrun
