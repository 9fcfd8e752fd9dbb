// The topology read from sysfs trees the tests make: two sockets of two cores with two
// hardware threads each, a NUMA node per socket, NVIDIA GPUs on nodes 0 and 1 (and a
// network card that is no GPU), as Linux lays them out under /sys.
#include "launcher/topology.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "launcher/placement.h"

namespace hvdrun {
namespace {

namespace fs = std::filesystem;

void put(const fs::path& file, const std::string& text) {
  fs::create_directories(file.parent_path());
  std::ofstream(file) << text << "\n";
}

// cpu c: socket c / 4, core (c / 2) % 2, its sibling thread c ^ 1; node = socket.
struct FakeSysfs {
  FakeSysfs() {
    root = fs::temp_directory_path() / ("hvdrun-sysfs-" + std::to_string(::getpid()));
    fs::remove_all(root);
    put(root / "devices/system/cpu/online", "0-7");
    for (int c = 0; c < 8; ++c) {
      fs::path t = root / ("devices/system/cpu/cpu" + std::to_string(c)) / "topology";
      put(t / "physical_package_id", std::to_string(c / 4));
      put(t / "core_id", std::to_string((c / 2) % 2));
    }
    put(root / "devices/system/node/node0/cpulist", "0-3");
    put(root / "devices/system/node/node1/cpulist", "4-7");
    put(root / "devices/system/node/online", "0-1");  // not a node directory
    gpu("0000:3b:00.0", "0x030200", 0);
    gpu("0000:af:00.0", "0x030200", 1);
    fs::path nic = root / "bus/pci/devices/0000:18:00.0";
    put(nic / "vendor", "0x15b3");
    put(nic / "class", "0x020000");
    put(nic / "numa_node", "0");
  }
  ~FakeSysfs() { fs::remove_all(root); }
  void gpu(const std::string& addr, const std::string& cls, int node) {
    fs::path d = root / "bus/pci/devices" / addr;
    put(d / "vendor", "0x10de");
    put(d / "class", cls);
    put(d / "numa_node", std::to_string(node));
  }
  fs::path root;
};

TEST(Topology, CpusPackagesCoresNodesAndGpusFromSysfs) {
  FakeSysfs sys;
  Topology t = read_topology(sys.root.string(), {});
  ASSERT_EQ(t.cpus.size(), 8u);
  EXPECT_EQ(t.cpus[5].id, 5);
  EXPECT_EQ(t.cpus[5].package, 1);
  EXPECT_EQ(t.cpus[5].core, 0);
  EXPECT_EQ(t.cpus[5].node, 1);
  EXPECT_EQ(t.cpus[2].core, 1);
  ASSERT_EQ(t.gpus.size(), 2u);  // the network card is not one
  EXPECT_EQ(t.gpus[0].pci, "0000:3b:00.0");
  EXPECT_EQ(t.gpus[0].node, 0);
  EXPECT_EQ(t.gpus[1].node, 1);
}

TEST(Topology, OnlyTheCpusThisProcessMayUse) {
  FakeSysfs sys;
  Topology t = read_topology(sys.root.string(), {4, 5, 6, 7});
  ASSERT_EQ(t.cpus.size(), 4u);
  EXPECT_EQ(t.cpus.front().id, 4);
}

TEST(Topology, MissingFilesReadAsOnePackageOneNode) {
  FakeSysfs sys;
  fs::remove_all(sys.root / "devices/system/node");
  for (int c = 0; c < 8; ++c) fs::remove_all(sys.root / ("devices/system/cpu/cpu" + std::to_string(c)));
  Topology t = read_topology(sys.root.string(), {});
  ASSERT_EQ(t.cpus.size(), 8u);
  EXPECT_EQ(t.cpus[7].package, 0);
  EXPECT_EQ(t.cpus[7].node, 0);
  EXPECT_EQ(t.cpus[7].core, 7);  // a core each
}

// The tree through the planner: what --dry-run would say on such a host.
TEST(Topology, TheFakeHostsPlan) {
  FakeSysfs sys;
  Topology t = read_topology(sys.root.string(), {});
  auto gpu = place_ranks(t, BindTo::kAuto, 2);
  ASSERT_TRUE(gpu.ok());
  EXPECT_EQ(cpu_list_text((*gpu)[0].cpus), "0-3");
  EXPECT_EQ((*gpu)[1].what, "numa 1 (GPU 0000:af:00.0)");
  EXPECT_EQ(cpu_list_text((*gpu)[1].cpus), "4-7");
  auto cores = place_ranks(t, BindTo::kAuto, 4);  // more ranks than GPUs: a core each
  ASSERT_TRUE(cores.ok());
  EXPECT_EQ(cpu_list_text((*cores)[1].cpus), "2-3");
  EXPECT_EQ((*cores)[2].what, "core 0 (socket 1)");
}

TEST(CpuList, TheKernelsFormatBothWays) {
  EXPECT_EQ(parse_cpu_list("0-3,8,10-11"), (std::vector<int>{0, 1, 2, 3, 8, 10, 11}));
  EXPECT_EQ(cpu_list_text({0, 1, 2, 3, 8, 10, 11}), "0-3,8,10-11");
  EXPECT_TRUE(parse_cpu_list("3-1").empty());
  EXPECT_TRUE(parse_cpu_list("x").empty());
  EXPECT_EQ(cpu_list_text({}), "");
}

}  // namespace
}  // namespace hvdrun
