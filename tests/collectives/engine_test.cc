// The collective engine with ranks as threads over socketpair rings: negotiation in any
// order, threads and waits, every op kind. (A cycle's outcome: fusion, the response cache,
// eager reductions: engine_cycle_test.cc; mismatches: engine_mismatch_test.cc; join and
// failures: engine_failure_test.cc; the timeline: engine_timeline_test.cc.)
#include "engine_test_util.h"

namespace hvdrun {
namespace {

using namespace engine_test;

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

// HVDRUN_THREAD_AFFINITY (Horovod's HOROVOD_THREAD_AFFINITY): one CPU id per local rank,
// or one for every rank; anything else binds nothing.
TEST(EngineThreadAffinity, TheLocalRanksEntryOfTheList) {
  EXPECT_EQ(thread_cpu_of("0,4,8,12", 2, 4), 8);
  EXPECT_EQ(thread_cpu_of("3", 1, 4), 3);
  EXPECT_EQ(thread_cpu_of("", 0, 1), -1);
  EXPECT_EQ(thread_cpu_of("0,4", 2, 4), -1);  // fewer ids than local ranks (Horovod: an error, nothing set)
  EXPECT_EQ(thread_cpu_of("0,x", 0, 2), -1);
  EXPECT_EQ(thread_cpu_of("0,,1", 0, 3), -1);
}

}  // namespace
}  // namespace hvdrun
