// The engine tests' shared parts: ranks as threads over socketpair rings (Job), each rank's
// work on its own thread with a deadline (on_all), and allreduce requests and tensors with
// their expected values (reference.h).
#pragma once

#include "collectives/engine/engine.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <gtest/gtest.h>
#include <random>
#include <regex>
#include <set>
#include <thread>

#include "collectives/dtype.h"
#include "collectives/ring.h"
#include "collectives/timeline.h"
#include "reference.h"

namespace hvdrun::engine_test {

using testref::expected_value;
using testref::input_value;
using testref::load;
using testref::store;
using testref::tolerance;

inline std::vector<std::unique_ptr<Ring>> make_rings(int n, RingOptions o = {}) {
  std::vector<std::unique_ptr<Ring>> rings(n);
  if (n == 1) {
    rings[0] = std::make_unique<Ring>(0, 1, transport::Pair{}, transport::Pair{}, o);
    return rings;
  }
  std::vector<UniqueFd> send_end(n), recv_end(n);
  for (int r = 0; r < n; ++r) {
    int sv[2];
    EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    send_end[r].reset(sv[0]);
    recv_end[(r + 1) % n].reset(sv[1]);
  }
  for (int r = 0; r < n; ++r) {
    transport::Pair right(std::move(send_end[r]), {(r + 1) % n, "h" + std::to_string((r + 1) % n)});
    transport::Pair left(std::move(recv_end[r]), {(r + n - 1) % n, "h" + std::to_string((r + n - 1) % n)});
    rings[r] = std::make_unique<Ring>(r, n, std::move(right), std::move(left), o);
  }
  return rings;
}

struct Job {
  std::vector<std::unique_ptr<Ring>> rings;
  std::vector<std::unique_ptr<Engine>> engines;
  // cut_rank: keep copies of that rank's sockets (socket_copies), so that a test can cut it
  // off with shutdown(2) without touching its Ring from another thread.
  Job(int n, EngineOptions base = {}, RingOptions ro = {}, std::function<void(EngineOptions&, int)> tweak = {},
      int cut_rank = -1) {
    ro.timeout_s = 30;
    rings = make_rings(n, ro);
    // Taken before any engine thread exists (shutdown(2) acts on the socket, whatever fd).
    if (cut_rank >= 0) socket_copies = {dup(rings[cut_rank]->left_fd()), dup(rings[cut_rank]->right_fd())};
    for (int r = 0; r < n; ++r) {
      EngineOptions o = base;
      o.rank = r;
      o.size = n;
      o.host_of = [](int p) { return "h" + std::to_string(p); };
      if (tweak) tweak(o, r);
      engines.push_back(std::make_unique<Engine>(rings[r].get(), o));
    }
  }
  ~Job() {
    // Engines first (they use the rings); all at once, as a job's ranks shut down.
    std::vector<std::thread> t;
    for (auto& e : engines) t.emplace_back([&e] { e.reset(); });
    for (auto& x : t) x.join();
    if (socket_copies.first >= 0) ::close(socket_copies.first);
    if (socket_copies.second >= 0) ::close(socket_copies.second);
  }
  std::pair<int, int> socket_copies{-1, -1};
  int size() const { return static_cast<int>(rings.size()); }
};

template <class Fn>
std::vector<std::string> on_all(int n, Fn fn) {
  std::vector<std::future<std::string>> f;
  for (int r = 0; r < n; ++r) f.push_back(std::async(std::launch::async, [&fn, r] { return fn(r); }));
  std::vector<std::string> out;
  for (auto& x : f) {
    // Every blocking call has a deadline: a hang fails the test instead of stalling ctest.
    if (x.wait_for(std::chrono::seconds(60)) != std::future_status::ready) {
      ADD_FAILURE() << "a rank did not finish within 60 s";
      std::abort();
    }
    out.push_back(x.get());
  }
  return out;
}

inline Request allreduce_req(const std::string& name, const void* send, void* recv, size_t count, hvd_dtype_t t,
                             hvd_op_t op, double pre = 1, double post = 1) {
  Request r;
  r.spec.name = name;
  r.spec.kind = OpKind::kAllreduce;
  r.spec.dtype = static_cast<uint8_t>(t);
  r.spec.op = static_cast<uint8_t>(op);
  r.spec.prescale = pre;
  r.spec.postscale = post;
  r.spec.counts = {count};
  r.tensors = {{send, recv}};
  return r;
}

struct Tensor {
  std::string name;
  hvd_dtype_t dtype;
  hvd_op_t op;
  size_t count;
  std::vector<char> in, out;
};

// A step's tensors: mixed dtypes, ops and sizes.
inline std::vector<Tensor> make_tensors(int rank, int n, int how_many, unsigned seed) {
  std::mt19937 g(seed);
  std::vector<Tensor> ts;
  const hvd_dtype_t dtypes[] = {HVD_FLOAT32, HVD_FLOAT64, HVD_INT32, HVD_FLOAT16, HVD_INT64, HVD_BFLOAT16};
  for (int i = 0; i < how_many; ++i) {
    Tensor t;
    t.name = "grad." + std::to_string(i);
    t.dtype = dtypes[g() % 6];
    t.op = static_cast<hvd_op_t>(g() % 5);
    if (t.op == HVD_OP_AVERAGE && !dtype_is_float(t.dtype)) t.op = HVD_OP_SUM;
    t.count = 1 + g() % (i % 7 == 0 ? 70000 : 900);
    size_t es = dtype_size(t.dtype);
    t.in.resize(t.count * es);
    t.out.assign(t.count * es, 0);
    for (size_t k = 0; k < t.count; ++k) store(t.in.data(), k, t.dtype, input_value(rank, k, n, t.op));
    ts.push_back(std::move(t));
  }
  return ts;
}

inline std::string check_tensor(const Tensor& t, int n) {
  for (size_t k = 0; k < t.count; ++k) {
    double e = expected_value(k, n, t.op), g = load(t.out.data(), k, t.dtype);
    if (std::fabs(g - e) > tolerance(t.dtype, e))
      return t.name + " (" + dtype_name(t.dtype) + " " + op_name(t.op) + ") element " + std::to_string(k) + ": got " +
             std::to_string(g) + ", expected " + std::to_string(e);
  }
  return "";
}

// Submits the tensors in a per-rank shuffled order, waits for all, checks them.
inline std::string run_step(Engine& e, std::vector<Tensor>& ts, int rank, int n, unsigned seed) {
  std::vector<size_t> order(ts.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::mt19937 g(seed * 31 + rank);
  std::shuffle(order.begin(), order.end(), g);
  std::vector<hvd_handle_t> hs;
  for (size_t i : order) {
    auto& t = ts[i];
    auto h = e.submit(allreduce_req(t.name, t.in.data(), t.out.data(), t.count, t.dtype, t.op));
    if (!h) return h.error().message;
    hs.push_back(*h);
  }
  for (auto h : hs)
    if (auto s = e.wait(h); !s) return s.error().message;
  for (auto& t : ts)
    if (auto m = check_tensor(t, n); !m.empty()) return m;
  return "";
}

}  // namespace hvdrun::engine_test
