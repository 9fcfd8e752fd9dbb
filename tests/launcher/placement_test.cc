// The placement planner (launcher/placement): topologies made here, the plan checked.
#include "launcher/placement.h"

#include <gtest/gtest.h>

namespace hvdrun {
namespace {

// `sockets` packages of `cores` cores of `threads` hardware threads; a NUMA node per package.
Topology host(int sockets, int cores, int threads, std::vector<int> gpu_nodes = {}) {
  Topology t;
  int id = 0;
  for (int s = 0; s < sockets; ++s)
    for (int c = 0; c < cores; ++c)
      for (int h = 0; h < threads; ++h) t.cpus.push_back({id++, s, c, s});
  for (size_t g = 0; g < gpu_nodes.size(); ++g) t.gpus.push_back({"0000:0" + std::to_string(g) + ":00.0", gpu_nodes[g]});
  return t;
}

std::vector<std::string> cpus_of(const std::vector<RankPlacement>& p) {
  std::vector<std::string> out;
  for (const auto& r : p) out.push_back(cpu_list_text(r.cpus));
  return out;
}

TEST(Placement, CoreGivesEachRankItsOwnCoreWithItsThreads) {
  auto p = place_ranks(host(2, 2, 2), BindTo::kCore, 3);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(cpus_of(*p), (std::vector<std::string>{"0-1", "2-3", "4-5"}));
  EXPECT_EQ((*p)[2].what, "core 0 (socket 1)");
}

TEST(Placement, CoreRefusedWhenTheRanksOutnumberTheCores) {
  auto p = place_ranks(host(1, 2, 1), BindTo::kCore, 3);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.error().message, "--bind-to core: 3 ranks on a host with 2 cores; use --bind-to none (or socket)");
}

TEST(Placement, AutoLeavesOversubscribedRanksUnbound) {
  auto p = place_ranks(host(1, 2, 1), BindTo::kAuto, 3);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(cpus_of(*p), (std::vector<std::string>{"", "", ""}));
  EXPECT_EQ((*p)[0].what, "none (oversubscribed)");
  auto fits = place_ranks(host(1, 2, 1), BindTo::kAuto, 2);
  ASSERT_TRUE(fits.ok());
  EXPECT_EQ(cpus_of(*fits), (std::vector<std::string>{"0", "1"}));
}

TEST(Placement, SocketAndNumaSpreadTheRanksEvenly) {
  auto s = place_ranks(host(2, 2, 1), BindTo::kSocket, 4);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(cpus_of(*s), (std::vector<std::string>{"0-1", "0-1", "2-3", "2-3"}));
  EXPECT_EQ((*s)[3].what, "socket 1");
  auto n = place_ranks(host(2, 2, 1), BindTo::kNuma, 3);  // 3 over 2 nodes: 0, 0, 1
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(cpus_of(*n), (std::vector<std::string>{"0-1", "0-1", "2-3"}));
}

TEST(Placement, GpuBindsEachRankToItsGpusNumaNode) {
  Topology t = host(2, 2, 1, {1, 0, -1});
  auto p = place_ranks(t, BindTo::kGpu, 4);  // rank 3 shares GPU 0
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(cpus_of(*p), (std::vector<std::string>{"2-3", "0-1", "", "2-3"}));
  EXPECT_EQ((*p)[0].what, "numa 1 (GPU 0000:00:00.0)");
  EXPECT_EQ((*p)[2].what, "none (GPU 0000:02:00.0 has no NUMA node)");
  auto none = place_ranks(host(1, 2, 1), BindTo::kGpu, 1);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.error().message, "--bind-to gpu: this host has no NVIDIA GPU in sysfs");
}

TEST(Placement, AutoUsesTheGpusWhenEachRankHasOne) {
  auto p = place_ranks(host(2, 4, 1, {0, 1}), BindTo::kAuto, 2);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(cpus_of(*p), (std::vector<std::string>{"0-3", "4-7"}));
  auto more = place_ranks(host(2, 4, 1, {0, 1}), BindTo::kAuto, 4);  // more ranks than GPUs: cores
  ASSERT_TRUE(more.ok());
  EXPECT_EQ(cpus_of(*more), (std::vector<std::string>{"0", "1", "2", "3"}));
}

TEST(Placement, NoneBindsNothing) {
  auto p = place_ranks(host(2, 2, 1, {0}), BindTo::kNone, 2);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(cpus_of(*p), (std::vector<std::string>{"", ""}));
}

TEST(Placement, NamesAndHorovodsBindingArgs) {
  EXPECT_EQ(*parse_bind_to("numa", "--bind-to"), BindTo::kNuma);
  EXPECT_EQ(*parse_bind_to("package", "--bind-to"), BindTo::kSocket);
  EXPECT_EQ(parse_bind_to("l3cache", "--bind-to").error().message,
            "--bind-to: 'l3cache' is not one of auto, none, core, socket, numa, gpu");
  EXPECT_EQ(*bind_to_of_binding_args("-bind-to none -map-by slot"), BindTo::kNone);  // Horovod's default for Open MPI
  EXPECT_EQ(*bind_to_of_binding_args("--bind-to=socket --map-by=socket"), BindTo::kSocket);
  EXPECT_EQ(*bind_to_of_binding_args("--bind-to core:overload-allowed"), BindTo::kCore);
  EXPECT_EQ(bind_to_of_binding_args("--rankfile myrankfile").error().message,
            "--binding-args: '--rankfile' is not supported (hvdrun acts on --bind-to none|core|socket|numa and "
            "--map-by slot|core|socket|numa)");
}

}  // namespace
}  // namespace hvdrun
