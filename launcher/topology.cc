#include "launcher/topology.h"

#include <dirent.h>
#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <set>

#include "launcher/placement.h"
#include "launcher/sys_files.h"

namespace hvdrun {
namespace {

std::string first_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

int number_in(const std::string& path, int otherwise) {
  std::string s = first_line(path);
  char* end = nullptr;
  long v = std::strtol(s.c_str(), &end, 0);
  return s.empty() || end == s.c_str() ? otherwise : static_cast<int>(v);
}

// NVIDIA's PCI vendor id, and the display (0x03xxxx: VGA, 3D) class.
bool is_nvidia_gpu(const std::string& dev) {
  return first_line(dev + "/vendor") == "0x10de" && first_line(dev + "/class").rfind("0x03", 0) == 0;
}

}  // namespace

std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> out;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return out;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) out.push_back(c);
  return out;
}

Topology read_topology(const std::string& sysfs_root, const std::vector<int>& allowed) {
  Topology t;
  const std::string cpu_dir = sysfs_root + "/devices/system/cpu";
  std::vector<int> online = parse_cpu_list(first_line(cpu_dir + "/online"));
  std::set<int> permitted(allowed.begin(), allowed.end());
  std::vector<int> node_of(1 << 16, 0);
  for (const std::string& n : dir_entries(sysfs_root + "/devices/system/node")) {
    if (n.rfind("node", 0) != 0 || n.size() == 4) continue;
    int node = std::atoi(n.c_str() + 4);
    for (int c : parse_cpu_list(first_line(sysfs_root + "/devices/system/node/" + n + "/cpulist"))) node_of[c] = node;
  }
  for (int id : online) {
    if (!permitted.empty() && !permitted.count(id)) continue;
    std::string topo = cpu_dir + "/cpu" + std::to_string(id) + "/topology/";
    t.cpus.push_back({id, number_in(topo + "physical_package_id", 0), number_in(topo + "core_id", id), node_of[id]});
  }
  const std::string pci = sysfs_root + "/bus/pci/devices";
  for (const std::string& addr : dir_entries(pci))
    if (is_nvidia_gpu(pci + "/" + addr)) t.gpus.push_back({addr, number_in(pci + "/" + addr + "/numa_node", -1)});
  return t;
}

}  // namespace hvdrun
