// The C API boundary: every call takes the runtime lock, turns errors into HVD_ERR_* codes
// with a per-thread message, and never lets an exception escape.
#include <string>

#include "collectives/runtime.h"
#include "hvdrun/hvdrun.h"

namespace {

thread_local std::string g_last_error;

template <class Fn>
int guarded(Fn&& fn) {
  try {
    hvdrun::Status s = fn();
    if (s) return HVD_SUCCESS;
    g_last_error = s.error().message;
    return s.error().code > 0 ? s.error().code : HVD_ERR_INTERNAL;
  } catch (const std::exception& e) {
    g_last_error = std::string("internal error: ") + e.what();
    return HVD_ERR_INTERNAL;
  } catch (...) {
    g_last_error = "internal error";
    return HVD_ERR_INTERNAL;
  }
}

// Runs fn(runtime) under the runtime lock, as a guarded call.
template <class Fn>
int with_runtime(Fn&& fn) {
  return guarded([&] {
    auto& rt = hvdrun::Runtime::instance();
    std::lock_guard<std::mutex> lk(rt.mutex());
    return fn(rt);
  });
}

template <class Fn>
int view_field(Fn&& fn) {
  auto& rt = hvdrun::Runtime::instance();
  std::lock_guard<std::mutex> lk(rt.mutex());
  return rt.initialized() ? fn(rt.view()) : -1;
}

}  // namespace

extern "C" {

int hvd_init(void) {
  return with_runtime([&](hvdrun::Runtime& rt) { return rt.init(); });
}

int hvd_shutdown(void) {
  return with_runtime([&](hvdrun::Runtime& rt) { return rt.shutdown(); });
}

int hvd_initialized(void) {
  auto& rt = hvdrun::Runtime::instance();
  std::lock_guard<std::mutex> lk(rt.mutex());
  return rt.initialized() ? 1 : 0;
}

int hvd_rank(void) { return view_field([](const hvdrun::RankView& v) { return v.rank; }); }
int hvd_size(void) { return view_field([](const hvdrun::RankView& v) { return v.size; }); }
int hvd_local_rank(void) { return view_field([](const hvdrun::RankView& v) { return v.local_rank; }); }
int hvd_local_size(void) { return view_field([](const hvdrun::RankView& v) { return v.local_size; }); }
int hvd_cross_rank(void) { return view_field([](const hvdrun::RankView& v) { return v.cross_rank; }); }
int hvd_cross_size(void) { return view_field([](const hvdrun::RankView& v) { return v.cross_size; }); }

int hvd_barrier(void) {
  return with_runtime([&](hvdrun::Runtime& rt) { return rt.barrier(); });
}

int hvd_allreduce(const void* sendbuf, void* recvbuf, size_t count, hvd_dtype_t dtype, hvd_op_t op) {
  return with_runtime([&](hvdrun::Runtime& rt) { return rt.allreduce(sendbuf, recvbuf, count, dtype, op); });
}

int hvd_broadcast(void* buf, size_t count, hvd_dtype_t dtype, int root) {
  return with_runtime([&](hvdrun::Runtime& rt) { return rt.broadcast(buf, count, dtype, root); });
}

int hvd_allgather(const void* sendbuf, void* recvbuf, size_t sendcount, hvd_dtype_t dtype) {
  return with_runtime([&](hvdrun::Runtime& rt) { return rt.allgather(sendbuf, recvbuf, sendcount, dtype); });
}

const char* hvd_last_error(void) { return g_last_error.c_str(); }

}  // extern "C"
