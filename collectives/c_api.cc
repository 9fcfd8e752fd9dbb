// The C API boundary: turns errors into HVD_ERR_* codes with a per-thread message and never
// lets an exception escape. hvd_init and hvd_shutdown take the runtime lock; collectives
// only take it to find the engine, and wait without it; the rank view has its own lock.
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "collectives/c_api.h"
#include "collectives/gpu.h"
#include "collectives/gpu_version.h"
#include "collectives/runtime.h"
#include "collectives/dtype.h"
#include "common/tunables.h"
#include "hvdrun_version.h"
#include "hvdrun/hvdrun.h"

// The one table from an error's kind to the C API's code. Kinds no worker-side call makes
// (the launcher's) are a broken invariant if one gets here.
int hvd_code_of(hvdrun::ErrorKind kind) {
  using K = hvdrun::ErrorKind;
  switch (kind) {
    case K::kNotInitialized: return HVD_ERR_NOT_INITIALIZED;
    case K::kInvalidArgument:
    case K::kUsage: return HVD_ERR_INVALID_ARGUMENT;
    case K::kRendezvous: return HVD_ERR_RENDEZVOUS;
    case K::kAuth: return HVD_ERR_AUTH;
    case K::kTimeout:
    case K::kStartTimeout: return HVD_ERR_TIMEOUT;
    case K::kPeerLost: return HVD_ERR_PEER;
    case K::kMismatch: return HVD_ERR_MISMATCH;
    case K::kUnsupported: return HVD_ERR_UNSUPPORTED;
    case K::kCuda: return HVD_ERR_CUDA;
    case K::kNccl: return HVD_ERR_NCCL;
    case K::kReset: return HVD_ERR_RESET;
    case K::kRemoved: return HVD_ERR_REMOVED;
    case K::kInternal:
    case K::kBadHostFile:
    case K::kResourceLimit:
    case K::kUnreachableHost:
    case K::kLaunchFailed:
    case K::kNotFound:
    case K::kNotExecutable:
    case K::kRankFailed:
    case K::kRankKilled:
    case K::kRankExitedEarly:
    case K::kLostContact:
    case K::kInterrupted:
    case K::kOutputFailed:
    case K::kSystem:
    case K::kMalformed:
    case K::kMissingKey: return HVD_ERR_INTERNAL;
  }
  return HVD_ERR_INTERNAL;  // (a number that is no kind)
}

namespace {

using hvdrun::ErrorKind;
using hvdrun::make_error;

thread_local std::string g_last_error;

template <class Fn>
int guarded(Fn&& fn) {
  try {
    hvdrun::Status s = fn();
    if (s) return HVD_SUCCESS;
    g_last_error = s.error().message;
    return hvd_code_of(hvdrun::Runtime::instance().kind_seen(s.error().kind));
  } catch (const std::exception& e) {
    g_last_error = std::string("internal error: ") + e.what();
    return HVD_ERR_INTERNAL;
  } catch (...) {
    g_last_error = "internal error";
    return HVD_ERR_INTERNAL;
  }
}

hvdrun::Runtime& rt() { return hvdrun::Runtime::instance(); }

// In a process forked from the one that ran hvd_init (a DataLoader worker, a
// multiprocessing child), every call that would act on the job: HVD_ERR_NOT_INITIALIZED,
// naming the parent, before any lock is taken (a lock some other thread of the parent held
// at the fork stays held in the child). The queries answer the parent's values, as
// Horovod's do in such a child.
int refused_in_fork(const char* what) {
  if (!rt().forked_child()) return HVD_SUCCESS;
  const std::string self = "this process (pid " + std::to_string(getpid()) + ") is a fork of pid " +
                           std::to_string(rt().owner_pid()) + ", which called hvd_init";
  const int rank = rt().initialized() ? rt().view().rank : -1;
  const std::string as = rank >= 0 ? " as rank " + std::to_string(rank) : "";
  if (std::strcmp(what, "hvd_init") == 0)
    g_last_error = std::string(what) + ": " + self + as + ": a forked child has no rank of its own and cannot join " +
                   "the job (start a new process under hvdrun for that)";
  else
    g_last_error = std::string(what) + ": " + self + as + ": the job's connections are that process's, and a " +
                   "forked child runs no collectives (hvd_rank() and the other queries answer the parent's values)";
  return HVD_ERR_NOT_INITIALIZED;
}

template <class Fn>
int view_field(Fn&& fn) {
  if (!rt().initialized()) return -1;
  return fn(rt().view());
}

// A submitting call takes hvd_next_call's description, whatever its outcome.
struct TakesNextCall {
  ~TakesNextCall() { hvdrun::Runtime::clear_next_call(); }
};

// Runs a submitting call and stores its handle.
template <class Fn>
int submit(const char* what, hvd_handle_t* handle, Fn&& fn) {
  TakesNextCall takes;
  if (int rc = refused_in_fork(what)) return rc;
  return guarded([&]() -> hvdrun::Status {
    if (!handle) return make_error(ErrorKind::kInvalidArgument, "the handle pointer is null");
    hvdrun::Result<hvd_handle_t> h = fn();
    if (!h) return h.error();
    *handle = *h;
    return {};
  });
}

// Allocates the kept output of a finished handle and copies it out (blocking wrappers).
int take_output(hvd_handle_t h, size_t row_elems, hvd_dtype_t dtype, void** recvbuf, size_t* rows_per_rank) {
  return guarded([&]() -> hvdrun::Status {
    if (!recvbuf || !rows_per_rank) return make_error(ErrorKind::kInvalidArgument, "recvbuf or rows_per_rank is null");
    if (auto s = rt().result_rows(h, rows_per_rank); !s) {
      (void)rt().wait(h);
      return s;
    }
    size_t rows = 0;
    auto set = rt().process_set(hvdrun::handle_set(h));  // (the job, or the call's process set)
    for (int r = 0; set && r < set->size; ++r) rows += rows_per_rank[r];
    size_t bytes = rows * row_elems * hvdrun::dtype_size(dtype);
    void* out = std::malloc(bytes ? bytes : 1);
    if (!out) {
      (void)rt().wait(h);
      return make_error(ErrorKind::kInternal, "out of memory for " + std::to_string(bytes) + " bytes of output");
    }
    if (auto s = rt().wait_result(h, out); !s) {
      std::free(out);
      return s;
    }
    *recvbuf = out;
    return {};
  });
}

}  // namespace

extern "C" {

int hvd_init(void) {
  if (int rc = refused_in_fork("hvd_init")) return rc;
  return guarded([&] {
    std::lock_guard<std::mutex> lk(rt().mutex());
    return rt().init();
  });
}

int hvd_shutdown(void) {
  if (rt().forked_child()) {  // leaves the parent's job alone: sends and closes nothing
    rt().forget_in_child();
    return HVD_SUCCESS;
  }
  return guarded([&] {
    std::lock_guard<std::mutex> lk(rt().mutex());
    return rt().shutdown();
  });
}

int hvd_initialized(void) { return rt().initialized() ? 1 : 0; }

int hvd_elastic(void) { return hvdrun::tunable_string("HVDRUN_ELASTIC") == "1" ? 1 : 0; }

// The runtime's watcher's numbers (0 and 0 outside an elastic job).
int hvd_elastic_updates(long long* seq, int* kinds) {
  return guarded([&]() -> hvdrun::Status {
    if (!seq || !kinds) return make_error(ErrorKind::kInvalidArgument, "hvd_elastic_updates: seq or kinds is null");
    hvdrun::ElasticUpdates u = rt().elastic_updates();
    *seq = u.seq;
    *kinds = u.kinds;
    return {};
  });
}

int hvd_elastic_commit(long long commit) {
  return guarded([&]() -> hvdrun::Status {
    if (commit < 0) return make_error(ErrorKind::kInvalidArgument, "hvd_elastic_commit: commit is negative");
    return rt().report_commit(commit);
  });
}

int hvd_rank(void) { return view_field([](const hvdrun::RankView& v) { return v.rank; }); }
int hvd_size(void) { return view_field([](const hvdrun::RankView& v) { return v.size; }); }
int hvd_local_rank(void) { return view_field([](const hvdrun::RankView& v) { return v.local_rank; }); }
int hvd_local_size(void) { return view_field([](const hvdrun::RankView& v) { return v.local_size; }); }
int hvd_cross_rank(void) { return view_field([](const hvdrun::RankView& v) { return v.cross_rank; }); }
int hvd_cross_size(void) { return view_field([](const hvdrun::RankView& v) { return v.cross_size; }); }

int hvd_barrier(void) {
  TakesNextCall takes;
  if (int rc = refused_in_fork("hvd_barrier")) return rc;
  return guarded([&] { return rt().barrier(); });
}

int hvd_allreduce(const void* sendbuf, void* recvbuf, size_t count, hvd_dtype_t dtype, hvd_op_t op) {
  TakesNextCall takes;
  if (int rc = refused_in_fork("hvd_allreduce")) return rc;
  return guarded([&] { return rt().allreduce(sendbuf, recvbuf, count, dtype, op); });
}

int hvd_broadcast(void* buf, size_t count, hvd_dtype_t dtype, int root) {
  TakesNextCall takes;
  if (int rc = refused_in_fork("hvd_broadcast")) return rc;
  return guarded([&] { return rt().broadcast(buf, count, dtype, root); });
}

int hvd_allgather(const void* sendbuf, void* recvbuf, size_t sendcount, hvd_dtype_t dtype) {
  TakesNextCall takes;
  if (int rc = refused_in_fork("hvd_allgather")) return rc;
  return guarded([&] { return rt().allgather(sendbuf, recvbuf, sendcount, dtype); });
}

int hvd_allreduce_async(const char* name, const void* sendbuf, void* recvbuf, size_t count, hvd_dtype_t dtype,
                        hvd_op_t op, double prescale, double postscale, hvd_handle_t* handle) {
  return submit("hvd_allreduce_async", handle, [&] {
    return rt().allreduce_async(name, 1, &sendbuf, &recvbuf, &count, dtype, op, prescale, postscale);
  });
}

int hvd_grouped_allreduce_async(const char* name, int n, const void* const* sendbufs, void* const* recvbufs,
                                const size_t* counts, hvd_dtype_t dtype, hvd_op_t op, double prescale,
                                double postscale, hvd_handle_t* handle) {
  return submit("hvd_grouped_allreduce_async", handle, [&] {
    return rt().allreduce_async(name, n, sendbufs, recvbufs, counts, dtype, op, prescale, postscale,
                                "hvd_grouped_allreduce_async");
  });
}

int hvd_grouped_allreduce_dtypes_async(const char* name, int n, const void* const* sendbufs, void* const* recvbufs,
                                       const size_t* counts, const hvd_dtype_t* dtypes, hvd_op_t op, double prescale,
                                       double postscale, hvd_handle_t* handle) {
  return submit("hvd_grouped_allreduce_dtypes_async", handle, [&]() -> hvdrun::Result<hvd_handle_t> {
    if (!dtypes)
      return make_error(ErrorKind::kInvalidArgument, "hvd_grouped_allreduce_dtypes_async: dtypes is null");
    return rt().allreduce_async(name, n, sendbufs, recvbufs, counts, HVD_FLOAT32, op, prescale, postscale,
                                "hvd_grouped_allreduce_dtypes_async", dtypes);
  });
}

int hvd_broadcast_async(const char* name, void* buf, size_t count, hvd_dtype_t dtype, int root, hvd_handle_t* handle) {
  return submit("hvd_broadcast_async", handle, [&] { return rt().broadcast_async(name, buf, count, dtype, root); });
}

int hvd_allgatherv_async(const char* name, const void* sendbuf, size_t rows, size_t row_elems, hvd_dtype_t dtype,
                         hvd_handle_t* handle) {
  return submit("hvd_allgatherv_async", handle,
                [&] { return rt().allgatherv_async(name, sendbuf, nullptr, rows, row_elems, dtype); });
}

int hvd_alltoall_async(const char* name, const void* sendbuf, size_t rows, size_t row_elems, const size_t* splits,
                       hvd_dtype_t dtype, hvd_handle_t* handle) {
  return submit("hvd_alltoall_async", handle,
                [&] { return rt().alltoall_async(name, sendbuf, rows, row_elems, splits, dtype); });
}

int hvd_reducescatter_async(const char* name, const void* sendbuf, void* recvbuf, size_t rows, size_t row_elems,
                            hvd_dtype_t dtype, hvd_op_t op, hvd_handle_t* handle) {
  return submit("hvd_reducescatter_async", handle,
                [&] { return rt().reducescatter_async(name, sendbuf, recvbuf, rows, row_elems, dtype, op); });
}

int hvd_poll(hvd_handle_t handle) {
  if (refused_in_fork("hvd_poll")) return -1;
  try {
    return rt().poll(handle);
  } catch (...) {
    return -1;
  }
}

int hvd_wait(hvd_handle_t handle) {
  if (int rc = refused_in_fork("hvd_wait")) return rc;
  return guarded([&] { return rt().wait(handle); });
}

int hvd_join(int* last_joined_rank) {
  if (int rc = refused_in_fork("hvd_join")) return rc;
  return guarded([&] { return rt().join(last_joined_rank); });
}

int hvd_result_rows(hvd_handle_t handle, size_t* rows_per_rank) {
  if (int rc = refused_in_fork("hvd_result_rows")) return rc;
  return guarded([&] { return rt().result_rows(handle, rows_per_rank); });
}

int hvd_wait_result(hvd_handle_t handle, void* recvbuf) {
  if (int rc = refused_in_fork("hvd_wait_result")) return rc;
  return guarded([&] { return rt().wait_result(handle, recvbuf); });
}

int hvd_grouped_allreduce(int n, const void* const* sendbufs, void* const* recvbufs, const size_t* counts,
                          hvd_dtype_t dtype, hvd_op_t op) {
  TakesNextCall takes;
  if (int rc = refused_in_fork("hvd_grouped_allreduce")) return rc;
  return guarded([&]() -> hvdrun::Status {
    hvdrun::Runtime::BlockingName name(rt(), "grouped_allreduce");  // held until the wait is over
    hvdrun::Engine::CallerWaits waits;
    auto h = rt().allreduce_async(name.name().c_str(), n, sendbufs, recvbufs, counts, dtype, op, 1, 1,
                                  "hvd_grouped_allreduce");
    if (!h) return h.error();
    return rt().wait(*h);
  });
}

int hvd_allgatherv(const void* sendbuf, size_t rows, size_t row_elems, hvd_dtype_t dtype, void** recvbuf,
                   size_t* rows_per_rank) {
  if (int rc = refused_in_fork("hvd_allgatherv")) return rc;
  hvd_handle_t h = 0;
  hvdrun::Runtime::BlockingName name(rt(), "allgatherv");  // held until the output is taken
  int rc = submit("hvd_allgatherv", &h, [&] {
    hvdrun::Engine::CallerWaits waits;
    return rt().allgatherv_async(name.name().c_str(), sendbuf, nullptr, rows, row_elems, dtype, "hvd_allgatherv");
  });
  if (rc) return rc;
  return take_output(h, row_elems, dtype, recvbuf, rows_per_rank);
}

int hvd_alltoall(const void* sendbuf, size_t rows, size_t row_elems, const size_t* splits, hvd_dtype_t dtype,
                 void** recvbuf, size_t* rows_per_rank) {
  if (int rc = refused_in_fork("hvd_alltoall")) return rc;
  hvd_handle_t h = 0;
  hvdrun::Runtime::BlockingName name(rt(), "alltoall");  // held until the output is taken
  int rc = submit("hvd_alltoall", &h, [&] {
    hvdrun::Engine::CallerWaits waits;
    return rt().alltoall_async(name.name().c_str(), sendbuf, rows, row_elems, splits, dtype, "hvd_alltoall");
  });
  if (rc) return rc;
  return take_output(h, row_elems, dtype, recvbuf, rows_per_rank);
}

int hvd_reducescatter(const void* sendbuf, void* recvbuf, size_t rows, size_t row_elems, hvd_dtype_t dtype,
                      hvd_op_t op) {
  TakesNextCall takes;
  if (int rc = refused_in_fork("hvd_reducescatter")) return rc;
  return guarded([&]() -> hvdrun::Status {
    hvdrun::Runtime::BlockingName name(rt(), "reducescatter");  // held until the wait is over
    hvdrun::Engine::CallerWaits waits;
    auto h = rt().reducescatter_async(name.name().c_str(), sendbuf, recvbuf, rows, row_elems, dtype, op,
                                      "hvd_reducescatter");
    if (!h) return h.error();
    return rt().wait(*h);
  });
}

int hvd_next_call(int process_set, int ntensors, const int* ndims, const long long* dims) {
  return guarded([&] { return hvdrun::Runtime::set_next_call(process_set, ntensors, ndims, dims); });
}

int hvd_add_process_set(const int* ranks, int n, int* id) {
  if (int rc = refused_in_fork("hvd_add_process_set")) return rc;
  return guarded([&]() -> hvdrun::Status {
    if (!id) return make_error(ErrorKind::kInvalidArgument, "hvd_add_process_set: id is null");
    auto made = rt().add_process_set(ranks, n, false);
    if (!made) return made.error();
    *id = *made;
    return {};
  });
}

int hvd_init_process_sets(const int* ranks, const int* sizes, int nsets) {
  if (int rc = refused_in_fork("hvd_init_process_sets")) return rc;
  return guarded([&]() -> hvdrun::Status {
    if (nsets > 0 && (!ranks || !sizes))
      return make_error(ErrorKind::kInvalidArgument, "hvd_init_process_sets: ranks or sizes is null");
    for (int i = 0, at = 0; i < nsets; at += sizes[i++])
      if (auto made = rt().add_process_set(ranks + at, sizes[i], true); !made) return made.error();
    return {};
  });
}

int hvd_remove_process_set(int id) {
  if (int rc = refused_in_fork("hvd_remove_process_set")) return rc;
  return guarded([&] { return rt().remove_process_set(id); });
}

int hvd_process_set_info(int id, int* rank, int* size, int* ranks) {
  return guarded([&]() -> hvdrun::Status {
    auto info = rt().process_set(id);
    if (!info) return info.error();
    if (rank) *rank = info->rank;
    if (size) *size = info->size;
    if (ranks) std::copy(info->ranks.begin(), info->ranks.end(), ranks);
    return {};
  });
}

int hvd_process_set_ids(int* ids, int capacity, int* count) {
  return guarded([&]() -> hvdrun::Status {
    if (!count) return make_error(ErrorKind::kInvalidArgument, "hvd_process_set_ids: count is null");
    std::vector<int> all = rt().process_set_ids();
    *count = static_cast<int>(all.size());
    for (int i = 0; ids && i < capacity && i < *count; ++i) ids[i] = all[static_cast<size_t>(i)];
    return {};
  });
}

void hvd_free(void* p) { std::free(p); }

int hvd_nccl_built(void) { return std::strcmp(hvdrun::gpu_backend_name(), "nccl") == 0 ? 1 : 0; }
int hvd_cuda_built(void) { return std::strcmp(hvdrun::gpu_backend_name(), "none") != 0 ? 1 : 0; }
int hvd_nccl_version(void) { return hvdrun::gpu_nccl_version(); }
const char* hvd_version(void) { return HVDRUN_VERSION_STRING; }

const char* hvd_last_error(void) { return g_last_error.c_str(); }

}  // extern "C"
