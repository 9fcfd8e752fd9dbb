#include "launcher/plan.h"

#include <nlohmann/json.hpp>

#include "launcher/slurm_env.h"

namespace hvdrun {

Result<LauncherKind> parse_launcher_kind(const std::string& s) {
  if (s == "local") return LauncherKind::kLocal;
  if (s == "ssh") return LauncherKind::kSsh;
  if (s == "command") return LauncherKind::kCommand;
  if (s == "slurm") return LauncherKind::kSlurm;
  return error_of(ErrorKind::kUsage, "--launcher '" + s + "': expected slurm, ssh, local or command");
}

const char* launcher_kind_name(LauncherKind k) {
  switch (k) {
    case LauncherKind::kLocal: return "local";
    case LauncherKind::kSsh: return "ssh";
    case LauncherKind::kCommand: return "command";
    case LauncherKind::kSlurm: return "slurm";
  }
  return "?";
}

namespace {

// The launcher (--launcher, else what the options and the environment imply), checked
// against the options.
Status choose_launcher(const LaunchOptions& opts, JobPlan& plan) {
  const bool hosts_given = !opts.hosts.empty() || !opts.hostfile.empty();
  if (!opts.launcher.empty()) {
    auto k = parse_launcher_kind(opts.launcher);
    if (!k) return k.error();
    plan.launcher = *k;
  } else if (!opts.launch_command.empty()) {
    plan.launcher = LauncherKind::kCommand;
  } else if (hosts_given) {
    plan.launcher = LauncherKind::kSsh;
  } else if (!plan.slurm_job_id.empty()) {
    plan.launcher = LauncherKind::kSlurm;
  }
  switch (plan.launcher) {
    case LauncherKind::kSlurm:
      if (plan.slurm_job_id.empty())
        return error_of(ErrorKind::kUsage, "--launcher slurm: not inside a Slurm allocation (SLURM_JOB_ID is not set); run hvdrun "
                          "under salloc or in an sbatch script");
      break;
    case LauncherKind::kCommand:
      if (opts.launch_command.empty())
        return error_of(ErrorKind::kUsage, "--launcher command needs --launch-command 'PROGRAM ... {host} ...'");
      [[fallthrough]];
    case LauncherKind::kSsh:
      if (!hosts_given)
        return error_of(ErrorKind::kUsage, std::string("--launcher ") + launcher_kind_name(plan.launcher) +
                              " needs the hosts: -H or --hostfile");
      break;
    case LauncherKind::kLocal:
      if (hosts_given)
        return error_of(ErrorKind::kUsage, "--launcher local runs every rank on this machine: drop -H/--hostfile, or use --launcher ssh");
      break;
  }
  if (!opts.launch_command.empty() && plan.launcher != LauncherKind::kCommand)
    return error_of(ErrorKind::kUsage, std::string("--launch-command is for --launcher command, not ") + launcher_kind_name(plan.launcher));
  return {};
}

// The hosts and their slots: -H, else --hostfile, else Slurm's allocation (and -np's
// default there), else this machine with -np slots.
Status find_hosts(const LaunchOptions& opts, const std::map<std::string, std::string>& launcher_env, JobPlan& plan,
                  int& np) {
  if (!opts.hosts.empty()) {
    auto h = parse_host_list(opts.hosts);
    if (!h) return h.error();
    plan.hosts = std::move(*h);
  } else if (!opts.hostfile.empty()) {
    auto h = read_hostfile(opts.hostfile);
    if (!h) return h.error();
    plan.hosts = std::move(*h);
  } else if (plan.launcher == LauncherKind::kSlurm) {
    auto h = slurm::allocation_hosts(launcher_env);
    if (!h) return h.error();
    plan.hosts = std::move(*h);
    if (np == 0) {
      auto n = slurm::allocation_ntasks(launcher_env);
      if (!n) return n.error();
      np = *n;
    }
  } else {
    if (np == 0) return error_of(ErrorKind::kUsage, "-np is required when no hosts are given (-H or --hostfile)");
    plan.hosts = {{"localhost", np}};
  }
  return {};
}

}  // namespace

Result<JobPlan> make_plan(const LaunchOptions& opts, const std::map<std::string, std::string>& launcher_env) {
  JobPlan plan;
  auto env = [&](const char* name) {
    auto it = launcher_env.find(name);
    return it == launcher_env.end() ? std::string() : it->second;
  };
  plan.slurm_job_id = env("SLURM_JOB_ID");
  if (auto st = choose_launcher(opts, plan); !st) return st.error();
  int np = opts.np;
  if (auto st = find_hosts(opts, launcher_env, plan, np); !st) return st.error();
  auto ranks = assign_ranks(plan.hosts, np);
  if (!ranks) return ranks.error();
  plan.ranks = std::move(*ranks);
  auto overrides = parse_env_overrides(opts.env, launcher_env);
  if (!overrides) return overrides.error();
  plan.env_overrides = std::move(*overrides);
  return plan;
}

std::string dry_run_text(const JobPlan& plan, const std::vector<std::string>& command,
                         const std::map<int, std::string>& binding) {
  std::string out;
  for (const auto& r : plan.ranks) {
    nlohmann::ordered_json j;
    j["rank"] = r.rank;
    j["size"] = r.size;
    j["local_rank"] = r.local_rank;
    j["local_size"] = r.local_size;
    j["cross_rank"] = r.cross_rank;
    j["cross_size"] = r.cross_size;
    j["host"] = r.host;
    if (auto b = binding.find(r.rank); b != binding.end()) j["bind"] = b->second;
    j["argv"] = command;
    out += j.dump() + "\n";
  }
  return out;
}

}  // namespace hvdrun
