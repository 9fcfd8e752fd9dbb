// The NCCL backend: one communicator per process over every rank, its unique id relayed by
// hvdrun's rendezvous, collectives on a stream this runtime owns.
#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <optional>
#include <thread>

#include "collectives/cuda_util.h"
#include "collectives/dtype.h"
#include "collectives/gpu.h"
#include "collectives/gpu_version.h"
#include "collectives/nccl_id.h"
#include "collectives/nccl_library.h"

namespace hvdrun {
namespace {

Error nccl_error(const NcclLibrary& nccl, const std::string& what, ncclResult_t r, ncclComm_t comm = nullptr) {
  std::string text = std::string(nccl.GetErrorString(r));
  const char* last = nccl.GetLastError(comm);
  if (last && *last) text += " (" + std::string(last) + ")";
  return make_error(ErrorKind::kNccl, what + ": " + text);
}

ncclDataType_t nccl_dtype(hvd_dtype_t t) {
  switch (t) {
    case hvd_dtype_int_range_: break;  // not a value (hvdrun.h): refused before it gets here
    case HVD_INT8: return ncclInt8;
    case HVD_UINT8: return ncclUint8;
    case HVD_INT32: return ncclInt32;
    case HVD_INT64: return ncclInt64;
    case HVD_FLOAT16: return ncclFloat16;
    case HVD_BFLOAT16: return ncclBfloat16;
    case HVD_FLOAT32: return ncclFloat32;
    case HVD_FLOAT64: return ncclFloat64;
    case HVD_INT16: case HVD_BOOL: break;  // NCCL has neither: refused for device memory at submit
  }
  return ncclFloat32;  // unreachable: dtypes are checked by the runtime
}

ncclRedOp_t nccl_op(hvd_op_t op) {
  switch (op) {
    case hvd_op_int_range_: break;  // not a value (hvdrun.h): refused before it gets here
    case HVD_OP_SUM: return ncclSum;
    case HVD_OP_AVERAGE: return ncclAvg;
    case HVD_OP_MIN: return ncclMin;
    case HVD_OP_MAX: return ncclMax;
    case HVD_OP_PRODUCT: return ncclProd;
  }
  return ncclSum;
}

class NcclCollectives : public GpuCollectives {
 public:
  NcclCollectives(const NcclLibrary& nccl, const GpuSetup& s, int device, ncclComm_t comm, cudaStream_t stream)
      : nccl_(nccl), rank_(s.rank), size_(s.size), device_(device), timeout_s_(s.timeout_s), on_fatal_(s.on_fatal), comm_(comm), stream_(stream) {}

  ~NcclCollectives() override {
    if (comm_) nccl_.CommDestroy(comm_);  // (an aborted or broken one is gone already)
    if (stream_) cudaStreamDestroy(stream_);
  }

  // From the elastic watcher's thread (round_device.h): the communicator is aborted, which
  // ends the NCCL kernels a collective waits on; that collective and every later one
  // return `why`. comm_mu_ keeps the abort apart from a call enqueueing on the communicator.
  void abort(const Error& why) override {
    std::lock_guard<std::mutex> lk(comm_mu_);
    if (!comm_) return;
    abort_error_ = why;
    aborted_ = true;
    nccl_.CommAbort(comm_);
    comm_ = nullptr;
  }

  Status allreduce(const void* send, void* recv, size_t count, hvd_dtype_t dtype, hvd_op_t op) override {
    std::unique_lock<std::mutex> lk(comm_mu_);
    if (auto s = ready("hvd_allreduce"); !s) return s;
    ncclResult_t r = nccl_.AllReduce(send, recv, count, nccl_dtype(dtype), nccl_op(op), comm_, stream_);
    return finish("hvd_allreduce", r, lk);
  }

  Status broadcast(void* buf, size_t count, hvd_dtype_t dtype, int root) override {
    std::unique_lock<std::mutex> lk(comm_mu_);
    if (auto s = ready("hvd_broadcast"); !s) return s;
    ncclResult_t r = nccl_.Broadcast(buf, buf, count, nccl_dtype(dtype), root, comm_, stream_);
    return finish("hvd_broadcast", r, lk);
  }

  Status allgather(const void* send, void* recv, size_t count, hvd_dtype_t dtype) override {
    std::unique_lock<std::mutex> lk(comm_mu_);
    if (auto s = ready("hvd_allgather"); !s) return s;
    size_t bytes = count * dtype_size(dtype);
    char* mine = static_cast<char*>(recv) + bytes * rank_;
    // In place as our API defines it (send == recv: this rank's part at the front): move it
    // to its slot, which NCCL's in-place form expects.
    if (send == recv && rank_ != 0) {
      HVDRUN_CUDA_TRY("hvd_allgather: cudaMemcpyAsync",
                      cudaMemcpyAsync(mine, send, bytes, cudaMemcpyDeviceToDevice, stream_));
      send = mine;
    }
    ncclResult_t r = nccl_.AllGather(send, recv, count, nccl_dtype(dtype), comm_, stream_);
    return finish("hvd_allgather", r, lk);
  }

  // Prescale and postscale fold into one NCCL pre-multiplied sum (sum(f x_i) = f sum(x_i)),
  // with 1/size for an average: exact for SUM and AVERAGE; other reductions with scales
  // are not supported on the device.
  Status allreduce_scaled(const void* send, void* recv, size_t count, hvd_dtype_t dtype, hvd_op_t op, double prescale,
                          double postscale) override {
    if (prescale == 1 && postscale == 1) return allreduce(send, recv, count, dtype, op);
    if (op != HVD_OP_SUM && op != HVD_OP_AVERAGE)
      return unsupported(std::string("prescale/postscale with ") + op_name(op) + " on device memory");
    std::unique_lock<std::mutex> lk(comm_mu_);
    if (auto s = ready("hvd_allreduce_async"); !s) return s;
    double f = prescale * postscale / (op == HVD_OP_AVERAGE ? size_ : 1);
    float f32 = static_cast<float>(f);
    uint16_t f16 = dtype == HVD_FLOAT16 ? float_to_half(f32) : float_to_bf16(f32);
    const void* scalar = dtype == HVD_FLOAT64 ? static_cast<const void*>(&f)
                         : dtype == HVD_FLOAT32 ? static_cast<const void*>(&f32)
                                                : static_cast<const void*>(&f16);
    ncclRedOp_t pre_mul;
    if (ncclResult_t r = nccl_.RedOpCreatePreMulSum(&pre_mul, const_cast<void*>(scalar), nccl_dtype(dtype),
                                                  ncclScalarHostImmediate, comm_);
        r != ncclSuccess)
      return nccl_error(nccl_, "ncclRedOpCreatePreMulSum", r, comm_);
    ncclResult_t r = nccl_.AllReduce(send, recv, count, nccl_dtype(dtype), pre_mul, comm_, stream_);
    Status st = finish("hvd_allreduce_async", r, lk);
    if (!lk.owns_lock()) lk.lock();
    if (comm_) nccl_.RedOpDestroy(pre_mul, comm_);
    return st;
  }

  Status allgatherv(const void* send, void* recv, const std::vector<size_t>& bytes, std::vector<char>* kept) override {
    std::unique_lock<std::mutex> lk(comm_mu_);
    if (auto s = ready("hvd_allgatherv"); !s) return s;
    size_t total = 0;
    std::vector<size_t> off;
    for (auto b : bytes) {
      off.push_back(total);
      total += b;
    }
    DeviceBuffer tmp;
    char* out = static_cast<char*>(recv);
    if (!out) {
      if (auto s = tmp.alloc(total); !s) return s;
      out = tmp.p;
    }
    ncclResult_t r = nccl_.GroupStart();
    for (int p = 0; p < size_ && r == ncclSuccess; ++p)
      r = nccl_.Broadcast(p == rank_ ? send : out + off[p], out + off[p], bytes[p], ncclChar, p, comm_, stream_);
    ncclResult_t e = nccl_.GroupEnd();
    if (auto s = finish("hvd_allgatherv", r != ncclSuccess ? r : e, lk); !s) return s;
    if (!recv) return to_host(out, total, kept);
    return {};
  }

  Status alltoallv(const void* send, const std::vector<size_t>& bytes, int me, std::vector<char>* kept) override {
    std::unique_lock<std::mutex> lk(comm_mu_);
    if (auto s = ready("hvd_alltoall"); !s) return s;
    size_t in_total = 0;
    std::vector<size_t> roff(size_), soff(size_);
    size_t so = 0;
    for (int p = 0; p < size_; ++p) {
      roff[p] = in_total;
      in_total += bytes[static_cast<size_t>(p) * size_ + me];
      soff[p] = so;
      so += bytes[static_cast<size_t>(me) * size_ + p];
    }
    DeviceBuffer tmp;
    if (auto s = tmp.alloc(in_total); !s) return s;
    ncclResult_t r = nccl_.GroupStart();
    for (int p = 0; p < size_ && r == ncclSuccess; ++p) {
      size_t out_b = bytes[static_cast<size_t>(me) * size_ + p], in_b = bytes[static_cast<size_t>(p) * size_ + me];
      if (out_b) r = nccl_.Send(static_cast<const char*>(send) + soff[p], out_b, ncclChar, p, comm_, stream_);
      if (r == ncclSuccess && in_b) r = nccl_.Recv(tmp.p + roff[p], in_b, ncclChar, p, comm_, stream_);
    }
    ncclResult_t e = nccl_.GroupEnd();
    if (auto s = finish("hvd_alltoall", r != ncclSuccess ? r : e, lk); !s) return s;
    return to_host(tmp.p, in_total, kept);
  }

  // Horovod's uneven split: a full allreduce into a scratch buffer, then this rank's rows.
  Status reducescatter(const void* send, void* recv, size_t count, size_t first, size_t mine, hvd_dtype_t dtype,
                       hvd_op_t op) override {
    std::unique_lock<std::mutex> lk(comm_mu_);
    if (auto s = ready("hvd_reducescatter"); !s) return s;
    const size_t es = dtype_size(dtype);
    DeviceBuffer tmp;
    if (auto s = tmp.alloc(count * es); !s) return s;
    ncclResult_t r = nccl_.AllReduce(send, tmp.p, count, nccl_dtype(dtype), nccl_op(op), comm_, stream_);
    if (r == ncclSuccess && mine)
      HVDRUN_CUDA_TRY("hvd_reducescatter: cudaMemcpyAsync",
                      cudaMemcpyAsync(recv, tmp.p + first * es, mine * es, cudaMemcpyDeviceToDevice, stream_));
    return finish("hvd_reducescatter", r, lk);
  }

  Status copy_to_device(void* dst, const void* src, size_t bytes) override {
    std::unique_lock<std::mutex> lk(comm_mu_);
    if (auto s = ready("hvd_wait_result"); !s) return s;
    HVDRUN_CUDA_TRY("hvd_wait_result: cudaMemcpy", cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
    return {};
  }

 private:
  struct DeviceBuffer {
    char* p = nullptr;
    Status alloc(size_t bytes) {
      void* q = nullptr;
      if (cudaError_t e = cudaMalloc(&q, bytes ? bytes : 1); e != cudaSuccess) return cuda_error("cudaMalloc", e);
      p = static_cast<char*>(q);
      return {};
    }
    ~DeviceBuffer() {
      if (p) cudaFree(p);
    }
  };

  Status to_host(const char* dev, size_t bytes, std::vector<char>* kept) {
    kept->resize(bytes);
    if (bytes) HVDRUN_CUDA_TRY("cudaMemcpy to host", cudaMemcpy(kept->data(), dev, bytes, cudaMemcpyDeviceToHost));
    return {};
  }

  // Under comm_mu_ (held while the call enqueues).
  Status ready(const char* what) {
    if (aborted_) return *abort_error_;
    if (broken_) return make_error(ErrorKind::kNccl,
                                   std::string(what) + ": the NCCL communicator was aborted: " + broken_reason_);
    // The caller may have another device current on this thread.
    HVDRUN_CUDA_TRY(std::string(what) + ": cudaSetDevice", cudaSetDevice(device_));
    return {};
  }

  // Waits for the stream (comm_mu_ released), watching an abort, NCCL's asynchronous
  // errors and HVDRUN_TIMEOUT: a dead or silent peer aborts the communicator instead of
  // hanging the rank.
  Status finish(const char* what, ncclResult_t enqueued, std::unique_lock<std::mutex>& lk) {
    if (enqueued != ncclSuccess) return nccl_error(nccl_, std::string(what), enqueued, comm_);
    lk.unlock();
    using Clock = std::chrono::steady_clock;
    auto start = Clock::now();
    auto deadline = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s_));
    for (;;) {
      cudaError_t e = cudaStreamQuery(stream_);
      if (e == cudaSuccess) return {};
      if (e != cudaErrorNotReady) return cuda_error(std::string(what) + ": cudaStreamQuery", e);
      ncclResult_t async = ncclSuccess;
      {
        std::lock_guard<std::mutex> g(comm_mu_);
        if (aborted_) return *abort_error_;  // the round is over: the kernels were ended
        nccl_.CommGetAsyncError(comm_, &async);
        if (async != ncclSuccess && async != ncclInProgress) return fail(nccl_error(nccl_, what, async, comm_));
      }
      auto now = Clock::now();
      if (now > deadline)
        return fail_locked(make_error(ErrorKind::kTimeout,
                               std::string(what) + ": no progress in " + std::to_string(static_cast<int>(timeout_s_)) +
                                   " s (HVDRUN_TIMEOUT); a peer is gone or did not make the same call"));
      // Spin (yielding) for the first 50 ms, as cudaStreamSynchronize's default schedule
      // does, so that a call returns within microseconds of its kernel; then poll every
      // 100 us, which costs under 1% of anything that long.
      if (now - start < std::chrono::milliseconds(50)) std::this_thread::yield();
      else std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }

  Error fail_locked(Error e) {
    std::lock_guard<std::mutex> g(comm_mu_);
    if (aborted_) return *abort_error_;
    return fail(std::move(e));
  }

  // Under comm_mu_.
  Error fail(Error e) {
    broken_ = true;
    broken_reason_ = e.message;
    if (on_fatal_) on_fatal_("rank " + std::to_string(rank_) + ": " + e.message);
    nccl_.CommAbort(comm_);
    comm_ = nullptr;
    return e;
  }

  const NcclLibrary& nccl_;
  int rank_, size_, device_;
  double timeout_s_;
  std::function<void(const std::string&)> on_fatal_;
  std::mutex comm_mu_;  // comm_ and the state below
  ncclComm_t comm_;
  cudaStream_t stream_;
  bool broken_ = false;
  std::string broken_reason_;
  std::atomic<bool> aborted_{false};  // by abort(): the elastic round is over
  std::optional<Error> abort_error_;
};

}  // namespace

const char* gpu_backend_name() { return "nccl"; }
int gpu_nccl_version() { return NCCL_VERSION_CODE; }

Result<std::unique_ptr<GpuCollectives>> make_gpu_collectives(const GpuSetup& s) {
  auto device = select_device(s.rank, s.local_rank);
  if (!device) return device.error();
  auto loaded = nccl_library();
  if (!loaded) return loaded.error();
  const NcclLibrary& nccl = **loaded;
  auto id = exchange_nccl_id(
      s.store, s.rank, s.size, s.generation,
      [&nccl]() -> Result<std::string> {
        ncclUniqueId uid;
        if (ncclResult_t r = nccl.GetUniqueId(&uid); r != ncclSuccess) return nccl_error(nccl, "ncclGetUniqueId", r);
        return std::string(uid.internal, sizeof(uid.internal));
      },
      s.timeout_s);
  if (!id) return id.error();
  ncclUniqueId uid;
  static_assert(sizeof(uid.internal) == kNcclIdBytes);
  std::memcpy(uid.internal, id->data(), kNcclIdBytes);
  ncclComm_t comm = nullptr;
  if (ncclResult_t r = nccl.CommInitRank(&comm, s.size, uid, s.rank); r != ncclSuccess)
    return nccl_error(nccl, "ncclCommInitRank on device " + std::to_string(*device), r);
  cudaStream_t stream = nullptr;
  // A blocking stream: ordered after the legacy default stream's queued work.
  if (cudaError_t e = cudaStreamCreate(&stream); e != cudaSuccess) {
    nccl.CommDestroy(comm);
    return cuda_error("cudaStreamCreate", e);
  }
  return std::unique_ptr<GpuCollectives>(new NcclCollectives(nccl, s, *device, comm, stream));
}

}  // namespace hvdrun
