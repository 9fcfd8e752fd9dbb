// The engine with ranks that join, die, stop or stall: joined ranks' zeros, pending
// handles failed on every rank, stall reports naming the missing ranks.
#include <condition_variable>
#include <future>
#include <mutex>

#include "engine_test_util.h"

namespace hvdrun {
namespace {

using namespace engine_test;

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
  std::promise<void> joined;
  auto joined_f = joined.get_future();
  auto res = on_all(n, [&](int r) -> std::string {
    Engine& e = *job.engines[r];
    if (r == 1) {
      auto h = e.join();
      joined.set_value();
      int lj;
      auto s = e.wait_join(*h, &lj);
      return s ? "" : s.error().message;
    }
    std::vector<float> buf(5, 1.f);
    Request q = allreduce_req("bc", buf.data(), buf.data(), 5, HVD_FLOAT32, HVD_OP_SUM);
    q.spec.kind = OpKind::kBroadcast;
    q.spec.op = 0;
    q.spec.root = 0;
    if (joined_f.wait_for(std::chrono::seconds(30)) != std::future_status::ready) return "rank 1 never joined";
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
      if (f0.wait_for(std::chrono::seconds(30)) != std::future_status::ready ||
          f2.wait_for(std::chrono::seconds(30)) != std::future_status::ready)
        return "ranks 0 and 2 never submitted";
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
      if (s.error().kind != ErrorKind::kPeerLost) return "kind " + std::to_string(static_cast<int>(s.error().kind)) + ": " + s.error().message;
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
  std::promise<void> submitted1;
  auto submitted1_f = submitted1.get_future();
  auto res = on_all(n, [&](int r) -> std::string {
    Engine& e = *job.engines[r];
    std::vector<float> in(10, 1.f), out(10);
    auto h = e.submit(allreduce_req(r == 0 ? "only.on.0" : "only.on.1", in.data(), out.data(), 10, HVD_FLOAT32, HVD_OP_SUM));
    if (r == 1) submitted1.set_value();
    if (r == 0) {
      // Rank 1's request is pending when rank 0 leaves.
      if (submitted1_f.wait_for(std::chrono::seconds(30)) != std::future_status::ready) return "rank 1 never submitted";
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
  std::condition_variable reported;
  std::vector<std::string> reports;
  o.on_stall = [&](const std::string& rep, bool fatal) {
    std::lock_guard<std::mutex> lk(mu);
    reports.push_back(std::string(fatal ? "FATAL " : "") + rep);
    reported.notify_all();
  };
  Job job(n, o);
  auto res = on_all(n, [&](int r) -> std::string {
    Engine& e = *job.engines[r];
    std::vector<float> in(10, 1.f), out(10);
    // Once agreed (cached), then late on rank 1: a cached name's stall is reported too.
    for (int round = 0; round < 2; ++round) {
      if (r == 1 && round == 1) {
        // Late until rank 0 has reported it (one report per stall, however many checks see
        // it: stall_inspector_test.cc).
        std::unique_lock<std::mutex> lk(mu);
        if (!reported.wait_for(lk, std::chrono::seconds(30), [&] { return !reports.empty(); }))
          return "the stall was never reported";
      }
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

}  // namespace
}  // namespace hvdrun
