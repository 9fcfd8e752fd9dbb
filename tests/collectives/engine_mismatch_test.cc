// The engine when ranks disagree: a cached name changed on one rank, groups of different
// dtypes, every mismatch kind, a malformed message, a duplicate refused on one rank, a
// finished name taken until its handle is waited for.
#include "engine_test_util.h"

namespace hvdrun {
namespace {

using namespace engine_test;

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

// Horovod's test_horovod_allreduce_duplicate_name_error: an asynchronous operation's name
// stays taken after it finished, until its handle is waited for (whether it has finished
// when the second comes is timing). Rank 0 waits for its first before submitting again,
// rank 1 does not: rank 1's second is refused (announced on its own, nothing else pending
// under the name), and rank 0's second fails as its counterpart. Then the name works again.
TEST(Engine, AFinishedNameIsTakenUntilItsHandleIsWaitedFor) {
  const int n = 2;
  Job job(n);
  auto res = on_all(n, [&](int r) -> std::string {
    Engine& e = *job.engines[r];
    std::vector<float> in(4, 1.f), o(4), o2(4);
    std::string out;
    auto h = e.submit(allreduce_req("held", in.data(), o.data(), 4, HVD_FLOAT32, HVD_OP_SUM));
    if (!h) return h.error().message;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (e.poll(*h) != 1)
      if (std::chrono::steady_clock::now() > deadline) return "the first 'held' did not finish";
    if (r == 0 && !e.wait(*h)) out += "first failed on rank 0; ";
    auto h2 = e.submit(allreduce_req("held", in.data(), o2.data(), 4, HVD_FLOAT32, HVD_OP_SUM));
    if (r == 1) {
      if (h2 || h2.error().kind != ErrorKind::kInvalidArgument ||
          h2.error().message.find("'held': a request with this name is already pending") == std::string::npos)
        out += "a finished, unwaited name was taken again; ";
      if (!e.wait(*h)) out += "first failed on rank 1; ";
    } else {
      Status s = h2 ? e.wait(*h2) : Status(h2.error());
      if (s || s.error().message.find("refused on rank 1") == std::string::npos)
        out += "rank 0's second did not fail as rank 1's refusal: " + (s ? std::string("ok") : s.error().message);
    }
    if (o[0] != 2.f) out += " result " + std::to_string(o[0]);
    auto h3 = e.submit(allreduce_req("held", in.data(), o.data(), 4, HVD_FLOAT32, HVD_OP_SUM));
    if (!h3) return out + h3.error().message;
    if (auto s = e.wait(*h3); !s) out += s.error().message;
    if (o[0] != 2.f) out += " reuse result " + std::to_string(o[0]);
    return out;
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(res[r], "") << "rank " << r;
}

}  // namespace
}  // namespace hvdrun
