// A worker for the `gpu` tests: collectives on device memory through libhvdrun, checked
// against values computed on the host. Modes: check (every collective), mixed (a device
// send buffer with a host receive buffer must be refused), die (rank 1 dies mid-job).
#include <cuda_runtime.h>
#include <signal.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "hvdrun/hvdrun.h"

namespace {

int g_rank = 0;

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "rank %d: %s (%s)\n", g_rank, what.c_str(), hvd_last_error());
  std::exit(1);
}

void cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) die(std::string(what) + ": " + cudaGetErrorString(e));
}

template <class T>
struct DeviceVec {
  T* p = nullptr;
  size_t n;
  explicit DeviceVec(size_t n_) : n(n_) { cuda(cudaMalloc(&p, std::max<size_t>(1, n) * sizeof(T)), "cudaMalloc"); }
  ~DeviceVec() { cudaFree(p); }
  void put(const std::vector<T>& h) { cuda(cudaMemcpy(p, h.data(), n * sizeof(T), cudaMemcpyHostToDevice), "H2D"); }
  std::vector<T> get() const {
    std::vector<T> h(n);
    cuda(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), "D2H");
    return h;
  }
};

// Rank r's element i: small integers, exact in every type used here.
double value(int r, size_t i) { return static_cast<double>((r + 1) * ((i % 7) + 1)); }

template <class T>
void check_allreduce(hvd_dtype_t dt, hvd_op_t op, int size, size_t n, bool in_place) {
  std::vector<T> h(n);
  for (size_t i = 0; i < n; ++i) h[i] = static_cast<T>(value(g_rank, i));
  DeviceVec<T> send(n), recv(n);
  send.put(h);
  T* out = in_place ? send.p : recv.p;
  if (hvd_allreduce(send.p, out, n, dt, op) != HVD_SUCCESS) die("hvd_allreduce");
  auto got = (in_place ? send : recv).get();
  for (size_t i = 0; i < n; ++i) {
    double want = value(0, i);
    for (int r = 1; r < size; ++r) {
      double v = value(r, i);
      if (op == HVD_OP_SUM || op == HVD_OP_AVERAGE) want += v;
      if (op == HVD_OP_MIN) want = std::min(want, v);
      if (op == HVD_OP_MAX) want = std::max(want, v);
      if (op == HVD_OP_PRODUCT) want *= v;
    }
    if (op == HVD_OP_AVERAGE) want /= size;
    if (std::fabs(static_cast<double>(got[i]) - want) > 1e-3 * std::fabs(want) + 1e-6)
      die("allreduce dtype " + std::to_string(dt) + " op " + std::to_string(op) + " element " + std::to_string(i) +
          ": got " + std::to_string(static_cast<double>(got[i])) + ", want " + std::to_string(want));
  }
}

void check_all(int size) {
  for (bool in_place : {false, true})
    for (size_t n : {size_t{1}, size_t{1003}, size_t{1} << 20}) {
      for (hvd_op_t op : {HVD_OP_SUM, HVD_OP_AVERAGE, HVD_OP_MIN, HVD_OP_MAX, HVD_OP_PRODUCT}) {
        check_allreduce<float>(HVD_FLOAT32, op, size, n, in_place);
        check_allreduce<double>(HVD_FLOAT64, op, size, n, in_place);
      }
      for (hvd_op_t op : {HVD_OP_SUM, HVD_OP_MIN, HVD_OP_MAX}) {
        check_allreduce<int32_t>(HVD_INT32, op, size, n, in_place);
        check_allreduce<int64_t>(HVD_INT64, op, size, n, in_place);
      }
    }
  // Broadcast from every root.
  for (int root = 0; root < size; ++root) {
    size_t n = 4099;
    std::vector<int32_t> h(n);
    for (size_t i = 0; i < n; ++i) h[i] = static_cast<int32_t>(g_rank * 100000 + i);
    DeviceVec<int32_t> d(n);
    d.put(h);
    if (hvd_broadcast(d.p, n, HVD_INT32, root) != HVD_SUCCESS) die("hvd_broadcast");
    auto got = d.get();
    for (size_t i = 0; i < n; ++i)
      if (got[i] != static_cast<int32_t>(root * 100000 + i)) die("broadcast from root " + std::to_string(root));
  }
  // Allgather, out of place and in place (this rank's part at the front of recvbuf).
  for (bool in_place : {false, true}) {
    size_t n = 777;
    std::vector<float> h(n);
    for (size_t i = 0; i < n; ++i) h[i] = static_cast<float>(value(g_rank, i));
    DeviceVec<float> send(n), recv(n * size);
    const float* src = send.p;
    if (in_place) {
      cuda(cudaMemcpy(recv.p, h.data(), n * sizeof(float), cudaMemcpyHostToDevice), "H2D");
      src = recv.p;
    } else {
      send.put(h);
    }
    if (hvd_allgather(src, recv.p, n, HVD_FLOAT32) != HVD_SUCCESS) die("hvd_allgather");
    auto got = recv.get();
    for (int r = 0; r < size; ++r)
      for (size_t i = 0; i < n; ++i)
        if (got[r * n + i] != static_cast<float>(value(r, i)))
          die("allgather" + std::string(in_place ? " in place" : "") + ": rank " + std::to_string(r) + "'s element " +
              std::to_string(i));
  }
  // Host buffers still take the CPU ring in the same job.
  std::vector<float> hb(1000, 1.0f);
  if (hvd_allreduce(hb.data(), hb.data(), hb.size(), HVD_FLOAT32, HVD_OP_SUM) != HVD_SUCCESS) die("host allreduce");
  if (hb[999] != static_cast<float>(size)) die("host allreduce result");
}

// The engine's kinds on device memory: named async allreduces in a per-rank order with
// prescale/postscale, allgatherv and alltoall with kept output, reducescatter.
void check_engine(int size) {
  const size_t n = 4096;
  std::vector<DeviceVec<float>> in, out;
  std::vector<hvd_handle_t> h(6);
  for (int i = 0; i < 6; ++i) {
    in.emplace_back(n);
    out.emplace_back(n);
    in.back().put(std::vector<float>(n, static_cast<float>(g_rank + 1)));
  }
  for (int k = 0; k < 6; ++k) {
    int i = (k + g_rank) % 6;
    std::string name = "dev." + std::to_string(i);
    if (hvd_allreduce_async(name.c_str(), in[i].p, out[i].p, n, HVD_FLOAT32, i % 2 ? HVD_OP_AVERAGE : HVD_OP_SUM,
                            i % 3 ? 2.0 : 1.0, i % 3 ? 0.5 : 1.0, &h[i]) != HVD_SUCCESS)
      die("hvd_allreduce_async on device memory");
  }
  float sum = size * (size + 1) / 2.0f;
  for (int i = 0; i < 6; ++i) {
    if (hvd_wait(h[i]) != HVD_SUCCESS) die("hvd_wait on device memory");
    float expect = i % 2 ? sum / size : sum;
    auto got = out[i].get();
    if (std::fabs(got[n - 1] - expect) > 1e-3f) die("device allreduce " + std::to_string(i));
  }
  DeviceVec<int32_t> mine(static_cast<size_t>(g_rank + 1));
  mine.put(std::vector<int32_t>(g_rank + 1, g_rank));
  hvd_handle_t g;
  if (hvd_allgatherv_async("dev.ag", mine.p, g_rank + 1, 1, HVD_INT32, &g) != HVD_SUCCESS) die("allgatherv");
  std::vector<size_t> rows(size);
  if (hvd_result_rows(g, rows.data()) != HVD_SUCCESS) die("hvd_result_rows");
  size_t total = 0;
  for (auto r : rows) total += r;
  DeviceVec<int32_t> all(total);
  if (hvd_wait_result(g, all.p) != HVD_SUCCESS) die("hvd_wait_result");
  auto a = all.get();
  if (a[total - 1] != size - 1) die("device allgatherv data");
  DeviceVec<float> rs_in(static_cast<size_t>(size) * 3), rs_out(3);
  rs_in.put(std::vector<float>(size * 3, 1.f));
  if (hvd_reducescatter(rs_in.p, rs_out.p, size, 3, HVD_FLOAT32, HVD_OP_SUM) != HVD_SUCCESS) die("reducescatter");
  if (rs_out.get()[2] != static_cast<float>(size)) die("device reducescatter data");
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "check";
  if (hvd_init() != HVD_SUCCESS) die("hvd_init");
  g_rank = hvd_rank();
  int size = hvd_size();
  if (mode == "check") {
    check_all(size);
    std::printf("rank %d gpu checked\n", g_rank);
  } else if (mode == "engine") {
    check_engine(size);
    std::printf("rank %d gpu engine checked\n", g_rank);
  } else if (mode == "mixed") {
    DeviceVec<float> d(16);
    std::vector<float> h(16);
    int rc = hvd_allreduce(d.p, h.data(), 16, HVD_FLOAT32, HVD_OP_SUM);
    std::printf("rank %d mixed: rc=%d: %s\n", g_rank, rc, hvd_last_error());
    return rc == HVD_ERR_INVALID_ARGUMENT ? 0 : 1;
  } else if (mode == "die") {
    DeviceVec<float> d(1 << 20);
    if (hvd_allreduce(d.p, d.p, d.n, HVD_FLOAT32, HVD_OP_SUM) != HVD_SUCCESS) die("first allreduce");
    if (g_rank == 1) raise(SIGKILL);
    for (int i = 0; i < 1000; ++i)
      if (hvd_allreduce(d.p, d.p, d.n, HVD_FLOAT32, HVD_OP_SUM) != HVD_SUCCESS) die("allreduce after a peer died");
  }
  hvd_shutdown();
  return 0;
}
