// The collective engine with ranks as threads over socketpair rings: negotiation in any
// order, fusion, the response cache, mismatches, join, dead peers, stalls, the timeline.
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

namespace hvdrun {
namespace {

using testref::expected_value;
using testref::input_value;
using testref::load;
using testref::store;
using testref::tolerance;

std::vector<std::unique_ptr<Ring>> make_rings(int n, RingOptions o = {}) {
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

Request allreduce_req(const std::string& name, const void* send, void* recv, size_t count, hvd_dtype_t t, hvd_op_t op,
                      double pre = 1, double post = 1) {
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
std::vector<Tensor> make_tensors(int rank, int n, int how_many, unsigned seed) {
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

std::string check_tensor(const Tensor& t, int n) {
  for (size_t k = 0; k < t.count; ++k) {
    double e = expected_value(k, n, t.op), g = load(t.out.data(), k, t.dtype);
    if (std::fabs(g - e) > tolerance(t.dtype, e))
      return t.name + " (" + dtype_name(t.dtype) + " " + op_name(t.op) + ") element " + std::to_string(k) + ": got " +
             std::to_string(g) + ", expected " + std::to_string(e);
  }
  return "";
}

// Submits the tensors in a per-rank shuffled order, waits for all, checks them.
std::string run_step(Engine& e, std::vector<Tensor>& ts, int rank, int n, unsigned seed) {
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

class EngineSizes : public ::testing::TestWithParam<int> {};

TEST_P(EngineSizes, NamesInDifferentOrdersPerRankMixedDtypesAndOps) {
  const int n = GetParam();
  // Through the ring and the fusion buffer only, then with small allreduces eager.
  for (size_t eager : {size_t{0}, size_t{64 << 10}}) {
    SCOPED_TRACE("eager_bytes " + std::to_string(eager));
    EngineOptions o;
    o.fusion_bytes = 64 << 10;
    o.eager_bytes = eager;
    Job job(n, o);
    auto res = on_all(n, [&](int r) -> std::string {
      for (unsigned step = 0; step < 3; ++step) {
        auto ts = make_tensors(r, n, 40, 7);
        if (auto m = run_step(*job.engines[r], ts, r, n, step + 1); !m.empty())
          return "step " + std::to_string(step) + ": " + m;
      }
      return "";
    });
    for (int r = 0; r < n; ++r) EXPECT_EQ(res[r], "") << "rank " << r;
    auto st = job.engines[0]->stats();
    if (n > 1) {
      EXPECT_GT(st.cache_hits, 0u) << "steps 2 and 3 repeat step 1's names";
      if (eager == 0) {
        EXPECT_GT(st.fused_batches, 0u);
        EXPECT_EQ(st.eager, 0u);
      } else {
        EXPECT_GT(st.eager, 0u) << "steps 2 and 3: cached small allreduces travel with the negotiation";
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, EngineSizes, ::testing::Values(1, 2, 3, 4));

TEST(Engine, SameExecutionOrderEverywhereWithBlockingCallsInterleaved) {
  // Blocking-style calls (submit + wait) interleaved with async ones named in other orders.
  const int n = 3;
  Job job(n);
  auto res = on_all(n, [&](int r) -> std::string {
    Engine& e = *job.engines[r];
    std::vector<float> a(1000, 1.f + r), b(1000);
    std::vector<std::vector<float>> outs(5, std::vector<float>(10));
    std::vector<std::vector<float>> ins(5, std::vector<float>(10, static_cast<float>(r)));
    std::vector<hvd_handle_t> hs;
    for (int i = 0; i < 5; ++i) {
      int k = (i + r) % 5;
      hs.push_back(*e.submit(allreduce_req("async." + std::to_string(k), ins[k].data(), outs[k].data(), 10, HVD_FLOAT32,
                                           HVD_OP_SUM)));
    }
    auto h = e.submit(allreduce_req("blocking.0", a.data(), b.data(), 1000, HVD_FLOAT32, HVD_OP_SUM));
    if (!h) return h.error().message;
    if (auto s = e.wait(*h); !s) return s.error().message;
    for (auto x : hs)
      if (auto s = e.wait(x); !s) return s.error().message;
    if (b[999] != 6.f) return "blocking result " + std::to_string(b[999]);
    for (auto& o : outs)
      if (o[3] != 3.f) return "async result " + std::to_string(o[3]);
    return "";
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(res[r], "") << "rank " << r;
}

TEST(Engine, FusionBoundariesThresholdAndTensorLargerThanBuffer) {
  const int n = 3;
  EngineOptions o;
  o.fusion_bytes = 4096;
  o.eager_bytes = 0;  // the fusion buffer, not the negotiation messages
  Job job(n, o);
  auto res = on_all(n, [&](int r) -> std::string {
    Engine& e = *job.engines[r];
    // 1000-byte tensors: four fit, the fifth starts a new batch; 20000 bytes is larger than
    // the buffer and goes alone; prescale/postscale differ per tensor.
    std::vector<size_t> counts = {250, 250, 250, 250, 250, 5000, 250, 1};
    std::vector<std::vector<float>> in(counts.size()), out(counts.size());
    std::vector<hvd_handle_t> hs;
    for (size_t i = 0; i < counts.size(); ++i) {
      in[i].assign(counts[i], static_cast<float>(r + 1));
      out[i].assign(counts[i], -1.f);
      double pre = 1 + static_cast<double>(i % 3), post = 1.0 / (1 + static_cast<double>(i % 2));
      auto h = e.submit(allreduce_req("t" + std::to_string(i), in[i].data(), out[i].data(), counts[i], HVD_FLOAT32,
                                      i == 2 ? HVD_OP_AVERAGE : HVD_OP_SUM, pre, post));
      if (!h) return h.error().message;
      hs.push_back(*h);
    }
    for (auto h : hs)
      if (auto s = e.wait(h); !s) return s.error().message;
    for (size_t i = 0; i < counts.size(); ++i) {
      double pre = 1 + static_cast<double>(i % 3), post = 1.0 / (1 + static_cast<double>(i % 2));
      double sum = 0;
      for (int p = 0; p < n; ++p) sum += (p + 1) * pre;
      double expect = sum * post / (i == 2 ? n : 1);
      for (size_t k = 0; k < counts[i]; ++k)
        if (std::fabs(out[i][k] - expect) > 1e-4)
          return "tensor " + std::to_string(i) + ": " + std::to_string(out[i][k]) + " != " + std::to_string(expect);
    }
    return "";
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(res[r], "") << "rank " << r;
  auto st = job.engines[0]->stats();
  EXPECT_GE(st.unfused_tensors, 1u) << "the 20000-byte tensor cannot be fused";
}

TEST(Engine, FusionThresholdZeroDisablesFusion) {
  const int n = 2;
  EngineOptions o;
  o.fusion_bytes = 0;
  o.eager_bytes = 0;
  Job job(n, o);
  auto res = on_all(n, [&](int r) -> std::string {
    auto ts = make_tensors(r, n, 20, 3);
    return run_step(*job.engines[r], ts, r, n, 5);
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(res[r], "") << "rank " << r;
  EXPECT_EQ(job.engines[0]->stats().fused_batches, 0u);
  EXPECT_EQ(job.engines[0]->stats().unfused_tensors, 20u);
}

TEST(Engine, CacheHitsMissesAndInvalidation) {
  const int n = 2;
  Job job(n);
  std::atomic<int> phase{0};
  auto res = on_all(n, [&](int r) -> std::string {
    Engine& e = *job.engines[r];
    std::vector<float> in(100, 1.f), out(100);
    auto once = [&](size_t count) -> std::string {
      auto h = e.submit(allreduce_req("w", in.data(), out.data(), count, HVD_FLOAT32, HVD_OP_SUM));
      if (!h) return h.error().message;
      auto s = e.wait(*h);
      return s ? "" : s.error().message;
    };
    for (int i = 0; i < 3; ++i)
      if (auto m = once(100); !m.empty()) return m;
    // Every rank changes the count: the cached response is invalid, then agreed again.
    if (auto m = once(50); !m.empty()) return m;
    if (auto m = once(50); !m.empty()) return m;
    (void)phase;
    return "";
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(res[r], "") << "rank " << r;
  auto st = job.engines[0]->stats();
  EXPECT_EQ(st.cache_misses, 2u) << "first call, and the call after the change";
  EXPECT_EQ(st.cache_hits, 3u);
  // The three cached calls travel with the negotiation; the two announced in full do too
  // when both ranks announced them in the same cycle (timing: see the next test).
  EXPECT_GE(st.eager, 3u);
  EXPECT_LE(st.eager, 5u);
  EXPECT_GE(st.cache_invalidations, 1u);
}

TEST(Engine, SmallAllreduceAnnouncedByEveryRankInOneCycleCompletesFromTheNegotiation) {
  // Fresh names, each announced in full. Every rank queues its request while the engines
  // are idle (a caller-waits submit wakes no thread; a peer's cycle takes the queued request
  // along), so every rank normally announces it in the first cycle, with its data: done in
  // that exchange, without the ring. (An engine thread still awake from the last round may
  // start a cycle before a peer has queued its request: that request then runs through the
  // ring, with the same result, so the rounds only require one eager completion.)
  const int n = 3, rounds = 10;
  Job job(n);
  std::atomic<int> arrived{0};
  auto barrier = [&](int round) {
    arrived.fetch_add(1);
    while (arrived.load() < n * round) std::this_thread::yield();
  };
  auto res = on_all(n, [&](int r) -> std::string {
    Engine& e = *job.engines[r];
    std::vector<float> in(1000), out(1000);
    for (size_t k = 0; k < in.size(); ++k) in[k] = static_cast<float>(r + 1) * static_cast<float>(k % 7);
    for (int round = 0; round < rounds; ++round) {
      barrier(2 * round + 1);
      std::this_thread::sleep_for(std::chrono::milliseconds(5));  // the engine threads go idle
      std::fill(out.begin(), out.end(), -1.f);
      Result<hvd_handle_t> h = [&] {
        Engine::CallerWaits waits;
        return e.submit(allreduce_req("fresh." + std::to_string(round), in.data(), out.data(), in.size(),
                                      HVD_FLOAT32, HVD_OP_AVERAGE, 2, 0.5));
      }();
      if (!h) return h.error().message;
      barrier(2 * round + 2);
      if (auto s = e.wait(*h); !s) return s.error().message;
      for (size_t k = 0; k < out.size(); ++k) {
        double expect = 2.0 * (n * (n + 1) / 2) * static_cast<double>(k % 7) * 0.5 / n;
        if (std::fabs(out[k] - expect) > 1e-4)
          return "round " + std::to_string(round) + ", element " + std::to_string(k) + ": " + std::to_string(out[k]) +
                 " != " + std::to_string(expect);
      }
    }
    return "";
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(res[r], "") << "rank " << r;
  for (int r = 0; r < n; ++r) {
    auto st = job.engines[r]->stats();
    EXPECT_EQ(st.eager, job.engines[0]->stats().eager) << "rank " << r << ": every rank decides alike";
    EXPECT_GE(st.eager, 1u) << "rank " << r;
    EXPECT_EQ(st.eager + st.unfused_tensors + st.fused_tensors, static_cast<uint64_t>(rounds))
        << "rank " << r << ": each request ran once, from the messages or through the ring";
    EXPECT_EQ(st.cache_misses, static_cast<uint64_t>(rounds)) << "rank " << r;
  }
}

TEST(Engine, SmallCacheEvictsAndStaysCorrectAndCapacityZeroDisablesIt) {
  for (size_t capacity : {size_t{4}, size_t{0}}) {
    const int n = 3;
    EngineOptions o;
    o.cache_capacity = capacity;
    Job job(n, o);
    auto res = on_all(n, [&](int r) -> std::string {
      for (unsigned step = 0; step < 4; ++step) {
        auto ts = make_tensors(r, n, 10, 5);
        if (auto m = run_step(*job.engines[r], ts, r, n, step); !m.empty()) return m;
      }
      return "";
    });
    for (int r = 0; r < n; ++r) EXPECT_EQ(res[r], "") << "capacity " << capacity << " rank " << r;
    if (capacity == 0) EXPECT_EQ(job.engines[0]->stats().cache_hits, 0u);
    else EXPECT_GT(job.engines[0]->stats().cache_hits, 0u);
  }
}

TEST(Engine, CachedNameChangedOnOneRankIsAMismatchEverywhere) {
  const int n = 3;
  Job job(n);
  auto res = on_all(n, [&](int r) -> std::string {
    Engine& e = *job.engines[r];
    std::vector<float> in(100, 1.f), out(100);
    for (int i = 0; i < 2; ++i) {
      auto h = e.submit(allreduce_req("w", in.data(), out.data(), 100, HVD_FLOAT32, HVD_OP_SUM));
      if (auto s = e.wait(*h); !s) return "setup: " + s.error().message;
    }
    auto h = e.submit(allreduce_req("w", in.data(), out.data(), r == 1 ? 99 : 100, HVD_FLOAT32, HVD_OP_SUM));
    auto s = e.wait(*h);
    if (s) return "no error";
    if (s.error().kind != ErrorKind::kMismatch) return "kind " + std::to_string(static_cast<int>(s.error().kind));
    return s.error().message;
  });
  for (int r = 0; r < n; ++r) {
    EXPECT_NE(res[r].find("allreduce 'w': mismatched count: 100 on ranks 0,2; 99 on rank 1"), std::string::npos)
        << res[r];
  }
}

Request grouped_req(const std::string& name, const std::vector<hvd_dtype_t>& dtypes, std::vector<std::vector<char>>& in,
                    std::vector<std::vector<char>>& out, size_t count, int rank) {
  Request q;
  q.spec.name = name;
  q.spec.kind = OpKind::kAllreduce;
  q.spec.dtype = dtypes[0];
  q.spec.op = HVD_OP_SUM;
  in.assign(dtypes.size(), {});
  out.assign(dtypes.size(), {});
  for (size_t k = 0; k < dtypes.size(); ++k) {
    in[k].resize(count * dtype_size(dtypes[k]));
    out[k].assign(count * dtype_size(dtypes[k]), 0);
    for (size_t i = 0; i < count; ++i) store(in[k].data(), i, dtypes[k], rank + 1);
    q.spec.counts.push_back(count);
    q.tensors.push_back({in[k].data(), out[k].data()});
    if (dtypes[k] != dtypes[0]) q.spec.dtypes.assign(dtypes.begin(), dtypes.end());
  }
  return q;
}

// Issue 30.5: a grouped allreduce whose tensors' dtypes differ between ranks fails the whole
// group on every rank at once, naming the ranks and their dtypes (hvdrun.torch split a mixed
// list into one operation per dtype, named after it, so the ranks' names differed: a hang).
// A group of several dtypes that agree runs, each tensor in its own dtype.
TEST(Engine, AGroupOfSeveralDtypesRunsAndADifferentMixFailsItEverywhere) {
  const int n = 3;
  Job job(n);
  auto res = on_all(n, [&](int r) -> std::string {
    Engine& e = *job.engines[r];
    std::string out;
    std::vector<std::vector<char>> in, o;
    for (int step = 0; step < 3; ++step) {  // the second and third from the response cache
      auto h = e.submit(grouped_req("mixed", {HVD_FLOAT32, HVD_FLOAT64, HVD_INT32}, in, o, 100, r));
      if (!h) return h.error().message;
      if (auto s = e.wait(*h); !s) return s.error().message;
      for (size_t k = 0; k < 3; ++k)
        for (size_t i = 0; i < 100; i += 33) {
          hvd_dtype_t t = k == 0 ? HVD_FLOAT32 : k == 1 ? HVD_FLOAT64 : HVD_INT32;
          if (load(o[k].data(), i, t) != 6.0) out += "tensor " + std::to_string(k) + " gave " + std::to_string(load(o[k].data(), i, t)) + "\n";
        }
    }
    std::vector<hvd_dtype_t> mine = {HVD_FLOAT32, HVD_FLOAT32};
    if (r == 1) mine = {HVD_FLOAT32, HVD_FLOAT64};
    if (r == 2) mine = {HVD_FLOAT64, HVD_FLOAT32};
    auto h = e.submit(grouped_req("g", mine, in, o, 10, r));
    if (!h) return h.error().message;
    auto s = e.wait(*h);
    if (s || s.error().kind != ErrorKind::kMismatch) return out + "no mismatch error";
    out += s.error().message;
    // The engine goes on.
    auto h2 = e.submit(grouped_req("after", {HVD_FLOAT64, HVD_INT32}, in, o, 10, r));
    if (auto s2 = e.wait(*h2); !s2 || load(o[1].data(), 9, HVD_INT32) != 6.0) out += " after: broken";
    return out;
  });
  for (int r = 0; r < n; ++r)
    EXPECT_EQ(res[r], "rank " + std::to_string(r) +
                          ": allreduce 'g': mismatched dtype: float32 (every tensor) on rank 0; float32,float64 on "
                          "rank 1; float64,float32 on rank 2");
}

struct MismatchCase {
  const char* what;
  std::function<void(Request&, int rank)> change;
  const char* expect;
};

TEST(Engine, EveryMismatchKindFailsOnEveryRankNamingTensorRanksAndValues) {
  const int n = 3;
  std::vector<MismatchCase> cases = {
      {"dtype", [](Request& q, int r) { if (r == 2) q.spec.dtype = HVD_INT32; }, "mismatched dtype: float32 on ranks 0,1; int32 on rank 2"},
      {"count", [](Request& q, int r) { if (r == 0) q.spec.counts = {7}; }, "mismatched count: 7 on rank 0; 8 on ranks 1,2"},
      {"op", [](Request& q, int r) { if (r == 1) q.spec.op = HVD_OP_MAX; }, "mismatched reduction op: sum on ranks 0,2; max on rank 1"},
      {"prescale", [](Request& q, int r) { if (r == 1) q.spec.prescale = 0.5; }, "mismatched prescale factor: 1 on ranks 0,2; 0.5 on rank 1"},
      {"postscale", [](Request& q, int r) { if (r == 2) q.spec.postscale = 2; }, "mismatched postscale factor: 1 on ranks 0,1; 2 on rank 2"},
      {"kind", [](Request& q, int r) { if (r == 1) { q.spec.kind = OpKind::kBroadcast; q.spec.root = 0; q.spec.op = 0; } },
       "mismatched operation: allreduce on ranks 0,2; broadcast on rank 1"},
      {"root", [](Request& q, int r) { q.spec.kind = OpKind::kBroadcast; q.spec.op = 0; q.spec.root = r == 2 ? 1 : 0; q.tensors[0].send = q.tensors[0].recv; },
       "mismatched root rank: 0 on ranks 0,1; 1 on rank 2"},
      {"tensors", [](Request& q, int r) { if (r == 0) { q.spec.counts = {8, 8}; q.tensors.push_back(q.tensors[0]); } },
       "mismatched number of tensors: 2 on rank 0; 1 on ranks 1,2"},
  };
  Job job(n);
  auto res = on_all(n, [&](int r) -> std::string {
    Engine& e = *job.engines[r];
    std::string out;
    for (auto& c : cases) {
      std::vector<float> in(16, 1.f), o(16);
      Request q = allreduce_req(std::string("m.") + c.what, in.data(), o.data(), 8, HVD_FLOAT32, HVD_OP_SUM);
      c.change(q, r);
      auto h = e.submit(q);
      if (!h) return h.error().message;
      auto s = e.wait(*h);
      if (s || s.error().kind != ErrorKind::kMismatch) out += std::string(c.what) + ": no mismatch error\n";
      else if (s.error().message.find(c.expect) == std::string::npos ||
               s.error().message.find(std::string("'m.") + c.what + "'") == std::string::npos)
        out += std::string(c.what) + ": " + s.error().message + "\n";
    }
    // The engine still works after mismatches.
    std::vector<float> in(4, 1.f), o(4);
    auto h = e.submit(allreduce_req("after", in.data(), o.data(), 4, HVD_FLOAT32, HVD_OP_SUM));
    if (auto s = e.wait(*h); !s || o[0] != 3.f) out += "after: broken\n";
    return out;
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(res[r], "") << "rank " << r;
}

// A negotiation message built by hand (the engine's wire layout: collectives/engine/cycle_message.cc).
struct RawMessage {
  std::string out = std::string(Ring::kFrameBytes, '\0');
  template <class T>
  void put(T v) {
    out.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  void spec(const std::string& name, uint64_t count) {
    put<uint32_t>(static_cast<uint32_t>(name.size()));
    out += name;
    put<uint8_t>(static_cast<uint8_t>(OpKind::kAllreduce));
    put<uint8_t>(HVD_FLOAT32);
    put<uint8_t>(HVD_OP_SUM);
    put<uint8_t>(0);  // host memory
    put<int32_t>(-1);
    put<double>(1);
    put<double>(1);
    put<uint32_t>(1);
    put<uint64_t>(count);
    put<uint64_t>(1);
    put<uint32_t>(0);
    put<uint32_t>(0);  // one dtype for every tensor
  }
};

TEST(Engine, AMessageAnnouncingOneNameTwiceIsRefusedNotReadPastItsData) {
  // Rank 1 (a corrupt peer, played by the test on its ring) announces four 4000-byte
  // tensors and then "x" twice: 10 floats (their data fits the eager section, last) and
  // 1000 floats (no room left: no data). Rank 0 announces "x" with 1000 floats and its
  // data. Read naively, the specs agree and rank 0 would reduce 4000 bytes from rank 1's
  // 40-byte slot, past the end of the message.
  EngineOptions o;
  o.eager_bytes = 4096;  // per tensor; 16 KiB per message
  o.rank = 0;
  o.size = 2;
  RingOptions ro;
  ro.timeout_s = 5;  // were the message read, rank 0's leaving cycle would wait for the absent peer
  auto rings = make_rings(2, ro);
  Engine e(rings[0].get(), o);
  std::vector<float> in(1000, 1.f), out(1000, 0.f);
  // Submitted before the peer speaks: its message, arriving first, failed the engine (the
  // background thread joins the peer's cycle) before the submit, which then got the error.
  auto h = e.submit(allreduce_req("x", in.data(), out.data(), in.size(), HVD_FLOAT32, HVD_OP_SUM));
  ASSERT_TRUE(h) << h.error().message;
  auto peer = std::async(std::launch::async, [&] {
    RawMessage m;
    m.put<uint8_t>(0);   // flags
    m.put<uint32_t>(0);  // no cache bits
    m.put<uint32_t>(0);  // no invalidations
    m.put<uint32_t>(6);
    for (const char* n : {"a", "b", "c", "d"}) m.spec(n, 1000);
    m.spec("x", 10);
    m.spec("x", 1000);
    const uint32_t eager = 4 * 4000 + 40;
    m.put<uint32_t>(eager);
    m.out.resize((m.out.size() + 7) / 8 * 8, '\0');
    m.out.append(eager, '\0');
    std::vector<std::string> all(2);
    all[1] = m.out;
    return rings[1]->allgather_bytes(&all);
  });
  auto st = e.wait(*h);
  ASSERT_EQ(peer.wait_for(std::chrono::seconds(30)), std::future_status::ready);
  EXPECT_TRUE(peer.get());
  ASSERT_FALSE(st) << "the corrupt message was read";
  EXPECT_EQ(st.error().kind, ErrorKind::kInternal);
  EXPECT_NE(st.error().message.find("malformed negotiation message from rank 1"), std::string::npos)
      << st.error().message;
}

// Issue 30.5: a name submitted again while pending (two threads racing one name) must get
// the same decision on every rank. Rank 0 sees the two submissions overlap and refuses the
// second at once; rank 1 makes them one after the other. Its second pairs with rank 0's
// refused one and fails too (it used to wait for a partner that never came). The name then
// works again on both.
TEST(Engine, ADuplicateRefusedOnOneRankFailsItsCounterpartOnEveryRank) {
  const int n = 2;
  Job job(n);
  std::promise<void> both_submitted;
  auto submitted = both_submitted.get_future().share();
  auto res = on_all(n, [&](int r) -> std::string {
    Engine& e = *job.engines[r];
    std::vector<float> in(4, 1.f), o(4), o2(4);
    std::string out;
    if (r == 0) {
      auto h = e.submit(allreduce_req("dup", in.data(), o.data(), 4, HVD_FLOAT32, HVD_OP_SUM));
      auto h2 = e.submit(allreduce_req("dup", in.data(), o2.data(), 4, HVD_FLOAT32, HVD_OP_SUM));
      both_submitted.set_value();
      if (h2 || h2.error().kind != ErrorKind::kInvalidArgument ||
          h2.error().message.find("'dup': a request with this name is already pending") == std::string::npos)
        out = "duplicate accepted or wrong error";
      if (!h) return out + h.error().message;
      if (auto s = e.wait(*h); !s) out += s.error().message;
    } else {
      submitted.wait();
      for (int k = 0; k < 2; ++k) {
        auto h = e.submit(allreduce_req("dup", in.data(), k ? o2.data() : o.data(), 4, HVD_FLOAT32, HVD_OP_SUM));
        if (!h) return out + h.error().message;
        Status s = e.wait(*h);
        if (k == 0 && !s) out += s.error().message;
        if (k == 1 && (s || s.error().kind != ErrorKind::kInvalidArgument ||
                       s.error().message.find("allreduce 'dup': refused on rank 0, where it was submitted again "
                                              "while pending") == std::string::npos))
          out += "the second 'dup' did not fail as rank 0's refusal: " + (s ? std::string("ok") : s.error().message);
      }
    }
    if (o[0] != 2.f) out += " result " + std::to_string(o[0]);
    // The name used again pairs as the next submission on both ranks.
    for (int k = 0; k < 3; ++k) {
      auto h = e.submit(allreduce_req("dup", in.data(), o.data(), 4, HVD_FLOAT32, HVD_OP_SUM));
      if (!h) return out + h.error().message;
      if (auto s = e.wait(*h); !s) out += s.error().message;
      if (o[0] != 2.f) out += " reuse result " + std::to_string(o[0]);
    }
    return out;
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(res[r], "") << "rank " << r;
}

TEST(Engine, JoinWithUnevenDataContributesZerosAndAveragesOverAllRanks) {
  const int n = 4;
  Job job(n);
  std::vector<int> last(n, -2);
  auto res = on_all(n, [&](int r) -> std::string {
    Engine& e = *job.engines[r];
    // Rank r has r + 1 batches. In batch b, ranks r >= b contribute (r + 1).
    for (int b = 0; b <= r; ++b) {
      std::vector<float> in(300, static_cast<float>(r + 1)), sum(300), avg(300);
      auto h1 = e.submit(allreduce_req("sum", in.data(), sum.data(), 300, HVD_FLOAT32, HVD_OP_SUM));
      auto h2 = e.submit(allreduce_req("avg", in.data(), avg.data(), 300, HVD_FLOAT32, HVD_OP_AVERAGE));
      if (!h1 || !h2) return "submit failed";
      if (auto s = e.wait(*h1); !s) return s.error().message;
      if (auto s = e.wait(*h2); !s) return s.error().message;
      float expect = 0;
      for (int p = b; p < n; ++p) expect += static_cast<float>(p + 1);
      if (sum[0] != expect || sum[299] != expect)
        return "batch " + std::to_string(b) + ": sum " + std::to_string(sum[0]) + " != " + std::to_string(expect);
      if (std::fabs(avg[7] - expect / n) > 1e-5)
        return "batch " + std::to_string(b) + ": average " + std::to_string(avg[7]) + " != " + std::to_string(expect / n);
    }
    auto h = e.join();
    if (!h) return h.error().message;
    int lj = -1;
    if (auto s = e.wait_join(*h, &lj); !s) return s.error().message;
    last[r] = lj;
    return "";
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(res[r], "") << "rank " << r;
  for (int r = 0; r < n; ++r) EXPECT_EQ(last[r], 3) << "rank 3 has the most data and joins last";
}

TEST(Engine, BroadcastWhileARankHasJoinedIsAnError) {
  const int n = 2;
  Job job(n);
  auto res = on_all(n, [&](int r) -> std::string {
    Engine& e = *job.engines[r];
    if (r == 1) {
      auto h = e.join();
      int lj;
      auto s = e.wait_join(*h, &lj);
      return s ? "" : s.error().message;
    }
    std::vector<float> buf(5, 1.f);
    Request q = allreduce_req("bc", buf.data(), buf.data(), 5, HVD_FLOAT32, HVD_OP_SUM);
    q.spec.kind = OpKind::kBroadcast;
    q.spec.op = 0;
    q.spec.root = 0;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    auto h = e.submit(q);
    auto s = e.wait(*h);
    std::string out = s ? "broadcast succeeded with a joined rank" :
                      s.error().message.find("not supported while ranks have joined (joined: 1)") == std::string::npos
                          ? s.error().message : "";
    auto j = e.join();
    int lj;
    if (auto js = e.wait_join(*j, &lj); !js) out += js.error().message;
    if (lj != 0) out += " last joined " + std::to_string(lj);
    return out;
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(res[r], "") << "rank " << r;
}

TEST(Engine, PeerKilledWithHandlesPendingFailsThemOnEveryRank) {
  const int n = 3;
  Job job(n, {}, {}, {}, /*cut_rank=*/1);
  // Rank 2's handles stay pending (ranks 0 and 1 never submit "never"), then rank 1 dies:
  // its sockets close as a killed process's would.
  std::promise<void> submitted0, submitted2;
  auto f0 = submitted0.get_future(), f2 = submitted2.get_future();
  auto res = on_all(n, [&](int r) -> std::string {
    Engine& e = *job.engines[r];
    std::vector<float> in(1000, 1.f), out(1000);
    if (r == 1) {
      f0.wait();
      f2.wait();
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      // Kill: drop the engine without telling anyone, then the ring's sockets.
      ::shutdown(job.socket_copies.first, SHUT_RDWR);
      ::shutdown(job.socket_copies.second, SHUT_RDWR);
      return "";
    }
    std::vector<hvd_handle_t> hs;
    for (int i = 0; i < 5; ++i)
      hs.push_back(*e.submit(allreduce_req("pending." + std::to_string(i), in.data(), out.data(), 1000, HVD_FLOAT32,
                                           HVD_OP_SUM)));
    (r == 0 ? submitted0 : submitted2).set_value();
    std::string msgs;
    for (auto h : hs) {
      auto s = e.wait(h);
      if (s) return "a pending handle succeeded";
      if (s.error().kind != ErrorKind::kPeerLost)
        return "kind " + std::to_string(static_cast<int>(s.error().kind)) + ": " + s.error().message;
      msgs = s.error().message;
    }
    auto late = e.submit(allreduce_req("late", in.data(), out.data(), 1, HVD_FLOAT32, HVD_OP_SUM));
    if (late) return "a submit after the failure was accepted";
    return "";
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(res[r], "") << "rank " << r;
}

TEST(Engine, StopWithPendingHandlesFailsThemAndTellsThePeers) {
  const int n = 2;
  Job job(n);
  auto res = on_all(n, [&](int r) -> std::string {
    Engine& e = *job.engines[r];
    std::vector<float> in(10, 1.f), out(10);
    auto h = e.submit(allreduce_req(r == 0 ? "only.on.0" : "only.on.1", in.data(), out.data(), 10, HVD_FLOAT32, HVD_OP_SUM));
    if (r == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      e.stop("hvd_shutdown was called with this operation pending");
      auto s = e.wait(*h);
      if (s || s.error().message.find("hvd_shutdown was called with this operation pending") == std::string::npos)
        return s ? "succeeded" : s.error().message;
      return "";
    }
    auto s = e.wait(*h);
    if (s || s.error().message.find("rank 0 called hvd_shutdown") == std::string::npos)
      return s ? "succeeded" : s.error().message;
    return "";
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(res[r], "") << "rank " << r;
}

TEST(Engine, StallReportNamesTheMissingRanksAndHosts) {
  const int n = 3;
  EngineOptions o;
  o.stall_check_s = 0.3;
  std::mutex mu;
  std::vector<std::string> reports;
  o.on_stall = [&](const std::string& rep, bool fatal) {
    std::lock_guard<std::mutex> lk(mu);
    reports.push_back(std::string(fatal ? "FATAL " : "") + rep);
  };
  Job job(n, o);
  auto res = on_all(n, [&](int r) -> std::string {
    Engine& e = *job.engines[r];
    std::vector<float> in(10, 1.f), out(10);
    // Once agreed (cached), then late on rank 1: a cached name's stall is reported too.
    for (int round = 0; round < 2; ++round) {
      if (r == 1 && round == 1) std::this_thread::sleep_for(std::chrono::milliseconds(1500));
      auto h = e.submit(allreduce_req("late.on.1", in.data(), out.data(), 10, HVD_FLOAT32, HVD_OP_SUM));
      if (auto s = e.wait(*h); !s) return s.error().message;
    }
    return "";
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(res[r], "") << "rank " << r;
  std::lock_guard<std::mutex> lk(mu);
  ASSERT_EQ(reports.size(), 1u) << "one warning, not one per check";
  EXPECT_EQ(reports[0], "rank 1 (host h1) has not submitted: late.on.1\n");
}

TEST(Engine, ThreadsSubmittingConcurrently) {
  const int n = 2, threads = 4, per = 30;
  Job job(n);
  auto res = on_all(n, [&](int r) -> std::string {
    std::vector<std::future<std::string>> fs;
    for (int t = 0; t < threads; ++t)
      fs.push_back(std::async(std::launch::async, [&, t]() -> std::string {
        for (int i = 0; i < per; ++i) {
          std::vector<int32_t> in(64, r + t), out(64);
          auto h = job.engines[r]->submit(allreduce_req("t" + std::to_string(t) + "." + std::to_string(i), in.data(),
                                                        out.data(), 64, HVD_INT32, HVD_OP_SUM));
          if (!h) return h.error().message;
          if (auto s = job.engines[r]->wait(*h); !s) return s.error().message;
          if (out[63] != 2 * t + 1) return "wrong sum";
        }
        return "";
      }));
    std::string out;
    for (auto& f : fs) out += f.get();
    return out;
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(res[r], "") << "rank " << r;
}

TEST(Engine, IdleEngineRunsASingleRequestWithoutWaitingForACycle) {
  const int n = 2;
  EngineOptions o;
  o.cycle_ms = 2000;  // a cycle-paced engine would take seconds here
  Job job(n, o);
  auto res = on_all(n, [&](int r) -> std::string {
    Engine& e = *job.engines[r];
    std::vector<float> in(1024, 1.f), out(1024);
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 20; ++i) {
      auto h = e.submit(allreduce_req("x", in.data(), out.data(), 1024, HVD_FLOAT32, HVD_OP_SUM));
      if (auto s = e.wait(*h); !s) return s.error().message;
    }
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s > 1.5) return "20 calls took " + std::to_string(s) + " s";
    return "";
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(res[r], "") << "rank " << r;
}

// A request submitted right after a wait (the background thread keeps off the ring for
// park_idle after one, and a submit does not call it out: the wait that usually follows
// drives) and then only polled (hvd_poll) runs at once on every rank: a poll ends the
// pause. The pause is a minute here, past the deadline: without that, it never ran.
TEST(Engine, AnAsyncRequestOnlyPolledAfterAWaitRuns) {
  const int n = 2;
  EngineOptions o;
  o.park_idle = std::chrono::seconds(60);
  Job job(n, o);
  auto res = on_all(n, [&](int r) -> std::string {
    Engine& e = *job.engines[r];
    std::vector<float> in(256, 1.f), out(256), polled(256);
    for (int i = 0; i < 5; ++i) {
      auto h = e.submit(allreduce_req("blocking", in.data(), out.data(), 256, HVD_FLOAT32, HVD_OP_SUM));
      if (!h) return h.error().message;
      if (auto s = e.wait(*h); !s) return s.error().message;
      auto a = e.submit(allreduce_req("polled", in.data(), polled.data(), 256, HVD_FLOAT32, HVD_OP_SUM));
      if (!a) return a.error().message;
      auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (e.poll(*a) == 0) {
        if (std::chrono::steady_clock::now() > deadline) return "round " + std::to_string(i) + ": it never ran";
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
      if (auto s = e.wait(*a); !s) return s.error().message;
      if (polled[255] != 2.f) return "wrong sum " + std::to_string(polled[255]);
    }
    return "";
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(res[r], "") << "rank " << r;
}

TEST(Engine, BroadcastAllgathervAlltoallReducescatter) {
  for (int n : {1, 2, 3, 4}) {
    Job job(n);
    auto res = on_all(n, [&](int r) -> std::string {
      Engine& e = *job.engines[r];
      // broadcast from the last rank
      std::vector<int64_t> b(33, r == n - 1 ? 42 : -1);
      Request q;
      q.spec.name = "bc";
      q.spec.kind = OpKind::kBroadcast;
      q.spec.dtype = HVD_INT64;
      q.spec.root = n - 1;
      q.spec.counts = {33};
      q.tensors = {{b.data(), b.data()}};
      auto h = e.submit(q);
      if (auto s = e.wait(*h); !s || b[32] != 42) return "broadcast";
      // allgatherv: rank p sends p + 1 rows of 3 elements, value 100 p + row
      const size_t re = 3;
      std::vector<float> mine((r + 1) * re);
      for (size_t i = 0; i < mine.size(); ++i) mine[i] = static_cast<float>(100 * r + i / re);
      Request g;
      g.spec.name = "ag";
      g.spec.kind = OpKind::kAllgatherv;
      g.spec.dtype = HVD_FLOAT32;
      g.spec.counts = {static_cast<uint64_t>(r + 1)};
      g.spec.row_elems = re;
      g.tensors = {{mine.data(), nullptr}};
      h = e.submit(g);
      std::vector<size_t> rows;
      if (auto s = e.result_rows(*h, &rows); !s) return s.error().message;
      size_t total = 0;
      for (int p = 0; p < n; ++p) {
        if (rows[p] != static_cast<size_t>(p + 1)) return "allgatherv rows";
        total += rows[p];
      }
      std::vector<float> all(total * re);
      if (auto s = e.wait_result(*h, all.data()); !s) return s.error().message;
      size_t at = 0;
      for (int p = 0; p < n; ++p)
        for (int row = 0; row <= p; ++row, ++at)
          if (all[at * re + 2] != static_cast<float>(100 * p + row)) return "allgatherv data";
      // alltoall: rank r sends (dst + r) % 3 rows to dst, value 1000 r + dst
      std::vector<uint64_t> splits(n);
      size_t srows = 0;
      for (int d = 0; d < n; ++d) srows += (splits[d] = (d + r) % 3);
      std::vector<int32_t> send(srows * 2);
      size_t k = 0;
      for (int d = 0; d < n; ++d)
        for (uint64_t i = 0; i < splits[d] * 2; ++i) send[k++] = 1000 * r + d;
      Request a;
      a.spec.name = "a2a";
      a.spec.kind = OpKind::kAlltoall;
      a.spec.dtype = HVD_INT32;
      a.spec.counts = {srows};
      a.spec.row_elems = 2;
      a.spec.splits = splits;
      a.tensors = {{send.data(), nullptr}};
      h = e.submit(a);
      if (auto s = e.result_rows(*h, &rows); !s) return s.error().message;
      total = 0;
      for (int p = 0; p < n; ++p) {
        if (rows[p] != static_cast<size_t>((r + p) % 3)) return "alltoall rows from " + std::to_string(p);
        total += rows[p];
      }
      std::vector<int32_t> got(total * 2);
      if (auto s = e.wait_result(*h, got.data()); !s) return s.error().message;
      k = 0;
      for (int p = 0; p < n; ++p)
        for (size_t i = 0; i < rows[p] * 2; ++i)
          if (got[k++] != 1000 * p + r) return "alltoall data from " + std::to_string(p);
      // reducescatter: 7 rows of 2, rank r gets 7/n (+1 if r < 7 % n)
      std::vector<double> rs_in(14);
      for (size_t i = 0; i < 14; ++i) rs_in[i] = static_cast<double>(i + r);
      size_t share = 7 / n + (static_cast<size_t>(r) < 7 % n ? 1 : 0), first = 0;
      for (int p = 0; p < r; ++p) first += 7 / n + (static_cast<size_t>(p) < 7 % n ? 1 : 0);
      std::vector<double> rs_out(share * 2 + 1, -1);
      Request s;
      s.spec.name = "rs";
      s.spec.kind = OpKind::kReducescatter;
      s.spec.dtype = HVD_FLOAT64;
      s.spec.op = HVD_OP_SUM;
      s.spec.counts = {7};
      s.spec.row_elems = 2;
      s.tensors = {{rs_in.data(), rs_out.data()}};
      h = e.submit(s);
      if (auto st = e.wait(*h); !st) return st.error().message;
      for (size_t i = 0; i < share * 2; ++i) {
        double expect = 0;
        for (int p = 0; p < n; ++p) expect += static_cast<double>(first * 2 + i + p);
        if (rs_out[i] != expect) return "reducescatter element " + std::to_string(i);
      }
      if (rs_out[share * 2] != -1) return "reducescatter wrote past its share";
      return "";
    });
    for (int r = 0; r < n; ++r) EXPECT_EQ(res[r], "") << n << " ranks, rank " << r;
  }
}

TEST(Engine, TimelineIsParsedBackWithEveryPhase) {
  const int n = 2;
  std::string path = ::testing::TempDir() + "engine_timeline.json";
  std::vector<std::unique_ptr<Timeline>> tls;
  // (an earlier run's files: Timeline::open never overwrites)
  for (int r = 0; r < n; ++r) std::remove(Timeline::rank_path(path, r).c_str());
  for (int r = 0; r < n; ++r) tls.push_back(Timeline::open(path, r, "h" + std::to_string(r), true).value());
  {
    Job job(n, {}, {}, [&](EngineOptions& o, int r) { o.timeline = tls[r].get(); });
    auto res = on_all(n, [&](int r) -> std::string {
      auto ts = make_tensors(r, n, 6, 11);
      return run_step(*job.engines[r], ts, r, n, 2);
    });
    for (int r = 0; r < n; ++r) EXPECT_EQ(res[r], "");
  }
  tls.clear();
  for (int r = 0; r < n; ++r) {
    std::ifstream f(Timeline::rank_path(path, r));
    std::string line, all;
    std::getline(f, line);
    EXPECT_EQ(line, "[");
    int begins = 0, ends = 0, cycles = 0;
    std::set<std::string> phases;
    std::regex ev(R"re(^\{"name":"([^"]+)","ph":"([BEiM])".*"pid":(\d+).*\},$)re");
    while (std::getline(f, line)) {
      std::smatch m;
      ASSERT_TRUE(std::regex_match(line, m, ev)) << line;
      EXPECT_EQ(m[3], std::to_string(r));
      if (m[2] == "B") {
        ++begins;
        phases.insert(m[1]);
      }
      if (m[2] == "E") ++ends;
      if (m[1] == "CYCLE_START") ++cycles;
    }
    EXPECT_EQ(begins, ends) << "every phase is closed";
    EXPECT_GT(cycles, 0);
    EXPECT_TRUE(phases.count("QUEUE"));
    EXPECT_TRUE(phases.count("NEGOTIATE_allreduce"));
    EXPECT_TRUE(phases.count("ALLREDUCE"));
  }
}

// Issue 30.2: a rank creates its file, never opens what is there: a symbolic link (to a
// file of the user's) or an earlier job's file is an error naming it, and is left as it was
// (fopen "w" truncated the link's target).
TEST(Engine, TimelineNeverOverwritesWhatIsAtItsPath) {
  std::string dir = ::testing::TempDir() + "engine_timeline_links_" + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::string path = dir + "/t.json";
  { std::ofstream(dir + "/victim") << "precious\n"; }
  std::filesystem::create_symlink(dir + "/victim", Timeline::rank_path(path, 0));
  { std::ofstream(Timeline::rank_path(path, 1)) << "an earlier job's\n"; }
  for (int r = 0; r < 2; ++r) {
    auto t = Timeline::open(path, r, "h", false);
    ASSERT_FALSE(t) << "rank " << r;
    EXPECT_NE(t.error().message.find(Timeline::rank_path(path, r) + " exists already"), std::string::npos)
        << t.error().message;
  }
  std::ifstream v(dir + "/victim");
  std::string line;
  std::getline(v, line);
  EXPECT_EQ(line, "precious");
  EXPECT_TRUE(std::filesystem::is_symlink(Timeline::rank_path(path, 0)));
  std::ifstream e(Timeline::rank_path(path, 1));
  std::getline(e, line);
  EXPECT_EQ(line, "an earlier job's");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace hvdrun
