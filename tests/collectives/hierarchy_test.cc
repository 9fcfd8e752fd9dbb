// The hierarchy's pure parts (collectives/hierarchy): the layout of ranks on hosts and
// what the variables ask for. The hierarchical rings themselves: ring_test.cc.
#include "collectives/hierarchy.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <string>
#include <vector>

#include "hvdrun/hvdrun.h"

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

}  // namespace
}  // namespace hvdrun
