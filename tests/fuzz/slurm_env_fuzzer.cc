// libFuzzer target: what a Slurm allocation says about itself (launcher/slurm_env.h):
// Slurm's host lists (SLURM_JOB_NODELIST) and SLURM_TASKS_PER_NODE. Input: the node list,
// then a NUL, then the tasks per node. Every answer is hosts as Slurm would name them (no
// empty name, nothing an ssh client would take for an option, slots in range) or one
// printable line naming the bad value.
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "launcher/hosts.h"
#include "launcher/slurm_env.h"

namespace {

void check_line(const std::string& message) {
  if (message.empty()) __builtin_trap();
  for (unsigned char c : message)
    if (c == '\n' || c == '\r') __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  size_t nul = in.find('\0');
  std::string_view nodes = in.substr(0, nul);
  std::string_view tasks = nul == std::string_view::npos ? std::string_view() : in.substr(nul + 1);
  // Small bounds, so that a short input cannot ask for millions of names.
  auto names = hvdrun::slurm::expand_hostlist(nodes, 4096);
  if (names) {
    if (names->size() > 4096) __builtin_trap();
    for (const auto& n : *names)
      if (n.empty()) __builtin_trap();
  } else {
    check_line(names.error().message);
  }
  auto counts = hvdrun::slurm::parse_tasks_per_node(tasks);
  if (!counts) check_line(counts.error().message);
  if (names && names->size() <= 4096) {
    std::map<std::string, std::string> env{{"SLURM_JOB_NODELIST", std::string(nodes)},
                                           {"SLURM_TASKS_PER_NODE", std::string(tasks)}};
    auto hosts = hvdrun::slurm::allocation_hosts(env);
    if (hosts) {
      for (const auto& h : *hosts)
        if (h.host.empty() || h.slots < 1 || h.slots > hvdrun::kMaxSlotsPerHost) __builtin_trap();
    } else {
      check_line(hosts.error().message);
    }
  }
  return 0;
}
