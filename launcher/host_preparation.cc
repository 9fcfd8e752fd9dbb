#include "launcher/host_preparation.h"

#include "common/strings.h"
#include "launcher/spawn.h"

namespace hvdrun {

Result<std::string> check_host(const HostNeed& need, const ProcessBudget& have) {
  std::string exe;
  if (!need.program.empty()) {
    auto e = resolve_program(need.program, need.path);
    if (!e) return e.error();
    exe = *e;
  }
  if (auto st = check_process_budget(have, need.budget); !st) return st.error();
  return exe;
}

Result<PreparedHost> prepare_host(const HostNeed& need, double kill_grace) {
  auto exe = check_host(need, read_process_budget(tasks_needed(need.budget)));
  if (!exe) return exe.error();
  // The watchdog is forked before any thread or connection of ours exists.
  auto watchdog = Watchdog::start(kill_grace);
  if (!watchdog) return watchdog.error();
  return PreparedHost{std::move(*exe), std::move(*watchdog)};
}

std::string path_in(const std::vector<std::string>& env) {
  std::string path;
  for (const auto& kv : env)
    if (starts_with(kv, "PATH=")) path = kv.substr(5);
  return path;
}

}  // namespace hvdrun
