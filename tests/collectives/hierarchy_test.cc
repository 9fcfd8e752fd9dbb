// The hierarchy (collectives/hierarchy): the layout of ranks on hosts, what the variables
// ask for, and its set-up over an in-memory store with ranks as threads. The hierarchical
// collectives themselves: ring_hierarchical_test.cc.
#include "collectives/hierarchy.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "common/auth.h"
#include "hvdrun/hvdrun.h"
#include "ring_fixture.h"
#include "transport/memory_store.h"

namespace hvdrun {
namespace {

TEST(HostLayout, HostsInFirstRankOrderLocalIndicesInRankOrder) {
  auto h = host_layout({"a", "a", "b", "b", "c", "c"});
  EXPECT_EQ(h.hosts, 3);
  EXPECT_EQ(h.per_host, 2);
  EXPECT_EQ(h.rank_of, (std::vector<int>{0, 1, 2, 3, 4, 5}));
  // Interleaved ranks (a -H a:1,b:1 twice, or a host file listing a host twice).
  h = host_layout({"b", "a", "b", "a"});
  EXPECT_EQ(h.hosts, 2);
  EXPECT_EQ(h.per_host, 2);
  EXPECT_EQ(h.rank_of, (std::vector<int>{0, 2, 1, 3}));
  EXPECT_EQ(h.host_of, (std::vector<int>{0, 1, 0, 1}));
  EXPECT_EQ(h.local_of, (std::vector<int>{0, 0, 1, 1}));
  h = host_layout({"a", "a", "b"});
  EXPECT_EQ(h.per_host, 0);  // not homogeneous: no hierarchy
  EXPECT_TRUE(h.rank_of.empty());
}

// Sets the four variables for one test, and unsets them after.
struct Env {
  Env(const char* hvd_ar, const char* hvd_ag, const char* horovod_ar, const char* horovod_ag) {
    set("HVDRUN_HIERARCHICAL_ALLREDUCE", hvd_ar);
    set("HVDRUN_HIERARCHICAL_ALLGATHER", hvd_ag);
    set("HOROVOD_HIERARCHICAL_ALLREDUCE", horovod_ar);
    set("HOROVOD_HIERARCHICAL_ALLGATHER", horovod_ag);
  }
  ~Env() {
    for (const char* n : {"HVDRUN_HIERARCHICAL_ALLREDUCE", "HVDRUN_HIERARCHICAL_ALLGATHER",
                          "HOROVOD_HIERARCHICAL_ALLREDUCE", "HOROVOD_HIERARCHICAL_ALLGATHER"})
      unsetenv(n);
  }
  static void set(const char* name, const char* v) {
    if (v) setenv(name, v, 1);
    else unsetenv(name);
  }
};

TEST(HierarchyWanted, HvdrunsVariableThenHorovodsThenAuto) {
  {
    Env e(nullptr, nullptr, nullptr, nullptr);
    auto w = hierarchy_from_tunables();
    ASSERT_TRUE(w.ok()) << w.error().message;
    EXPECT_EQ(w->allreduce, Want::kAuto);
    EXPECT_EQ(w->allgather, Want::kAuto);
    EXPECT_TRUE(w->any());
  }
  {
    Env e("0", nullptr, "1", "false");
    auto w = hierarchy_from_tunables();
    ASSERT_TRUE(w.ok()) << w.error().message;
    EXPECT_EQ(w->allreduce, Want::kOff);  // hvdrun's name wins over Horovod's
    EXPECT_EQ(w->allgather, Want::kOff);  // Horovod's name when hvdrun's is not set
    EXPECT_FALSE(w->any());
  }
  {
    Env e("true", "auto", nullptr, "1");
    auto w = hierarchy_from_tunables();
    ASSERT_TRUE(w.ok()) << w.error().message;
    EXPECT_EQ(w->allreduce, Want::kOn);
    EXPECT_EQ(w->allgather, Want::kAuto);
  }
}

TEST(HierarchyWanted, AnUnknownValueIsAnErrorNamingIt) {
  Env e(nullptr, nullptr, "yes", nullptr);
  auto w = hierarchy_from_tunables();
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.error().kind, ErrorKind::kInvalidArgument);
  EXPECT_EQ(w.error().message, "HOROVOD_HIERARCHICAL_ALLREDUCE='yes': expected auto, 1 or 0");
}

using ringtest::HierarchyJob;

// The addresses come from the store, the local and the cross rings are connected phase by
// phase (the store's barriers), and the collectives then take the hierarchical path.
TEST(AttachHierarchy, ConnectsTheLocalAndCrossRingsThroughTheStore) {
  const int n = 4;
  HierarchyJob job({"a", "b", "a", "b"});  // interleaved: local rings {0, 2} and {1, 3}
  auto rings = ringtest::make_rings(n);
  auto results = ringtest::on_all(n, [&](int r) -> std::string {
    if (auto s = attach_hierarchy(*rings[r], job.setup(r), {Want::kOn, Want::kOn}); !s) return s.error().message;
    if (!rings[r]->hierarchy().allreduce || !rings[r]->hierarchy().allgather) return "no hierarchy attached";
    for (size_t count : {size_t{3}, size_t{100003}})
      if (std::string e = ringtest::check_allreduce(*rings[r], n, count, HVD_FLOAT32, HVD_OP_SUM, false); !e.empty())
        return e;
    std::vector<int32_t> mine(7, r), all(7 * n, -1);
    if (auto s = rings[r]->allgather(mine.data(), all.data(), 7, HVD_INT32); !s) return s.error().message;
    for (int p = 0; p < n; ++p)
      if (all[7 * p] != p || all[7 * p + 6] != p) return "allgather block " + std::to_string(p);
    return "";
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(results[r], "") << "rank " << r;
}

// The job's store, recording the names of the barriers asked for.
struct NamingStore : transport::Store {
  transport::Store& inner;
  std::mutex mu;
  std::set<std::string> barriers;
  explicit NamingStore(transport::Store& s) : inner(s) {}
  Status set(const std::string& k, const std::string& v) override { return inner.set(k, v); }
  Result<std::string> get(const std::string& k) override { return inner.get(k); }
  Status wait(const std::vector<std::string>& k, double t) override { return inner.wait(k, t); }
  Status barrier(const std::string& name, int n, double timeout_s) override {
    {
      std::lock_guard<std::mutex> lk(mu);
      barriers.insert(name);
    }
    return inner.barrier(name, n, timeout_s);
  }
  Result<transport::PeerAddress> peer(int r, std::chrono::steady_clock::time_point d) override {
    return inner.peer(r, d);
  }
};

// The rendezvous keeps a barrier done: a later hvd_init (an elastic round, an init after
// hvd_shutdown) that used the same names would pass them at once and connect its local and
// cross rings to the listeners together. The setup's generation names them apart.
TEST(AttachHierarchy, ItsBarriersAreNamedWithTheInitsGeneration) {
  const int n = 4;
  HierarchyJob job({"a", "b", "a", "b"});
  NamingStore store(job.store);
  auto rings = ringtest::make_rings(n);
  auto results = ringtest::on_all(n, [&](int r) -> std::string {
    HierarchySetup s = job.setup(r);
    s.store = &store;
    s.generation = "round3";
    auto st = attach_hierarchy(*rings[r], s, {Want::kOn, Want::kOn});
    return st ? "" : st.error().message;
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(results[r], "") << "rank " << r;
  EXPECT_EQ(store.barriers,
            (std::set<std::string>{"hvdrun/ring/hierarchy/round3/cross", "hvdrun/ring/hierarchy/round3/local"}));
}

TEST(AttachHierarchy, UnevenHostsAreAnErrorOnlyWhenAskedFor) {
  HierarchyJob job({"a", "a", "b"});
  auto rings = ringtest::make_rings(3);
  auto asked = attach_hierarchy(*rings[0], job.setup(0), {Want::kOn, Want::kAuto});
  ASSERT_FALSE(asked.ok());
  EXPECT_EQ(asked.error().kind, ErrorKind::kInvalidArgument);
  EXPECT_NE(asked.error().message.find("rank 0: hierarchical collectives: the hosts have different numbers of ranks"),
            std::string::npos)
      << asked.error().message;
  EXPECT_TRUE(attach_hierarchy(*rings[0], job.setup(0), {Want::kAuto, Want::kAuto}).ok());
  EXPECT_FALSE(rings[0]->hierarchy().allreduce);
}

TEST(AttachHierarchy, ARankThatNeverRegisteredIsAnErrorNamingIt) {
  HierarchyJob job({"a", "a", "b", "b"}, /*registered=*/false);
  auto rings = ringtest::make_rings(4);
  auto s = attach_hierarchy(*rings[1], job.setup(1, 0.2), {Want::kAuto, Want::kAuto});
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().kind, ErrorKind::kRendezvous);
  EXPECT_NE(s.error().message.find("rank 1: hierarchical collectives: rank 0's address"), std::string::npos)
      << s.error().message;
}

}  // namespace
}  // namespace hvdrun
