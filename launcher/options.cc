#include "launcher/options.h"

#include <unistd.h>

#include <CLI/CLI.hpp>

#include "launcher/exit_status.h"
#include "common/strings.h"
#include "common/tunables.h"
#include "hvdrun_version.h"

namespace hvdrun {
namespace {

constexpr const char* kDescription =
    "hvdrun: launch a distributed training job (horovodrun/mpirun compatible).\n"
    "Usage: hvdrun [options] [--] command [args...]";

}  // namespace

std::string environment_help() {
  std::string out;
  const char* titles[] = {"hvdrun reads:", "libhvdrun (the workers) reads:", "hvdrun sets for every worker:"};
  TunableUse uses[] = {TunableUse::kLauncher, TunableUse::kWorker, TunableUse::kContract};
  for (int i = 0; i < 3; ++i) {
    out += titles[i];
    out += "\n";
    for (const auto& t : all_tunables()) {
      if (t.use != uses[i]) continue;
      std::string name(t.env);
      if (!t.default_value.empty()) name += " (default " + std::string(t.default_value) + ")";
      if (!t.horovod.empty()) name += " (or " + std::string(t.horovod) + ")";
      out += "  " + name + "\n      " + std::string(t.help) + "\n";
    }
  }
  return out;
}

Result<ParsedCommandLine> parse_command_line(const std::vector<std::string>& args_in) {
  ParsedCommandLine out;
  LaunchOptions& o = out.options;
  std::string np_s, start_timeout_s, kill_grace_s, ssh_port_s, rdv_port_s;

  CLI::App app{kDescription, "hvdrun"};
  app.prefix_command();  // the first positional starts the command; the rest is its own
  app.set_version_flag("--version", std::string("hvdrun ") + HVDRUN_VERSION_STRING);
  app.get_formatter()->column_width(36);
  app.add_option("--num-proc", np_s, "Number of processes (-np N); default: every slot of the hosts")
      ->type_name("N");
  app.add_option("-H,--hosts", o.hosts, "Hosts and slots: host:slots,... (a bare host is one slot)")
      ->type_name("LIST");
  app.add_option("--hostfile", o.hostfile, "File of hosts: 'host slots=N', 'host:N' or 'host' per line")
      ->type_name("FILE");
  app.add_option("-p,--ssh-port", ssh_port_s, "SSH port of the remote hosts")->type_name("PORT");
  app.add_option("-i,--ssh-identity-file", o.ssh_identity_file, "SSH private key for the remote hosts")
      ->type_name("FILE");
  app.add_option("--ssh-host-key-checking", o.ssh_host_key_checking,
                 "yes: known hosts only; accept-new (default): add unknown hosts, refuse changed keys; no")
      ->type_name("POLICY")
      ->check(CLI::IsMember({"yes", "accept-new", "no"}));
  app.add_option("--ssh-command", o.ssh_command,
                 "Launch remote agents through this client (e.g. 'ssh -o ProxyJump=gw') instead of libssh")
      ->type_name("CMD");
  app.add_option("--launcher", o.launcher,
                 "How agents reach the hosts: slurm (srun inside an allocation), ssh, local or command (default: "
                 "slurm inside an allocation without -H/--hostfile, ssh with them, else local)")
      ->type_name("KIND")
      ->check(CLI::IsMember({"slurm", "ssh", "local", "command"}));
  app.add_option("--launch-command", o.launch_command,
                 "Start each host's agent with this command ({host} is replaced; without it, '-- HOST' is "
                 "appended), e.g. 'kubectl exec -i {host} --'; implies --launcher command")
      ->type_name("TEMPLATE");
  app.add_option("--remote-hvdrun", o.remote_hvdrun, "hvdrun on the remote hosts (default: this hvdrun's own path)")
      ->type_name("PATH");
  app.add_option("--start-timeout", start_timeout_s,
                 "Seconds for every rank to start and reach the rendezvous (env HVDRUN_START_TIMEOUT; default 30)")
      ->type_name("SECONDS");
  app.add_option("--kill-grace", kill_grace_s, "Seconds between SIGTERM and SIGKILL at teardown (default 5)")
      ->type_name("SECONDS");
  app.add_option("--network-interface", o.network_interface, "Network interface for the rendezvous and data plane")
      ->type_name("IFACE");
  app.add_option("--rendezvous-port", rdv_port_s, "Port of the rendezvous server (default: chosen by the OS)")
      ->type_name("PORT");
  app.add_option("--nccl-debug", o.nccl_debug, "Set NCCL_DEBUG for the workers: VERSION, WARN, INFO, ABORT or TRACE")
      ->type_name("LEVEL")
      ->transform(CLI::IsMember({"VERSION", "WARN", "INFO", "ABORT", "TRACE"}, CLI::ignore_case));
  app.add_option("--output-filename", o.output_dir, "Also write each rank's output to DIR/rank.N/{stdout,stderr}")
      ->type_name("DIR");
  app.add_flag("--prefix-output-with-timestamp", o.timestamps, "Put a timestamp before each output line");
  app.add_option("-x,--env", o.env, "Forward NAME or set NAME=VALUE for the workers (repeatable)")
      ->type_name("NAME[=VALUE]")
      ->allow_extra_args(false);
  app.add_option("--timeline-filename", o.timeline_file,
                 "Write one Chrome trace of the job's collectives to FILE (each rank writes FILE.rank<N>, merged "
                 "at the end; HVDRUN_TIMELINE, HOROVOD_TIMELINE)")
      ->type_name("FILE");
  bool mark_cycles = false;
  app.add_flag("--timeline-mark-cycles", mark_cycles,
               "Mark the engine's negotiation cycles in the timeline (HVDRUN_TIMELINE_MARK_CYCLES=1)");
  bool hier_allreduce = false, hier_allgather = false;
  app.add_flag("--hierarchical-allreduce", hier_allreduce,
               "Allreduce within each host over shared memory and between hosts over TCP "
               "(HOROVOD_HIERARCHICAL_ALLREDUCE=1 for the workers; default: auto)");
  app.add_flag("--hierarchical-allgather", hier_allgather,
               "Allgather between hosts, then within each host (HOROVOD_HIERARCHICAL_ALLGATHER=1; default: auto)");
  app.add_flag("--verbose", o.verbose, "Log what hvdrun does (same as --log-level debug)");
  app.add_option("--log-level", o.log_level, "trace, debug, info, warn, error or off (env HVDRUN_LOG_LEVEL)")
      ->type_name("LEVEL")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "critical", "off"}));
  app.add_flag("--dry-run", o.dry_run, "Print the plan, one JSON object per rank, and start nothing");
  app.add_flag("--horovod-compat", o.horovod_compat,
               "Put a 'horovod' package first on the workers' PYTHONPATH (horovod.torch = hvdrun.torch), "
               "unless a real Horovod is importable");
  bool help_env = false;
  app.add_flag("--help-env", help_env, "List every environment variable hvdrun and libhvdrun read or set, and exit");

  // Horovod's and mpirun's single-dash "-np" is not a CLI11 short option: rewrite it, but
  // only before the command (the command's own "-np" is its business).
  std::vector<std::string> args = args_in;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--" || a.empty() || a[0] != '-') break;
    if (a == "-np" || a == "-n") {
      args[i] = "--num-proc";
    } else if (starts_with(a, "-np=")) {
      args[i] = "--num-proc=" + a.substr(4);
      continue;
    }
    if (args[i].find('=') != std::string::npos) continue;
    const CLI::Option* opt = app.get_option_no_throw(args[i]);
    if (opt && opt->get_type_size() > 0 && opt->get_expected_min() > 0) ++i;  // skip its value
  }

  std::vector<std::string> rev(args.rbegin(), args.rend());
  try {
    app.parse(rev);
  } catch (const CLI::CallForHelp&) {
    out.action = ParsedCommandLine::Action::kPrintAndExit;
    out.print = app.help();
    return out;
  } catch (const CLI::CallForVersion&) {
    out.action = ParsedCommandLine::Action::kPrintAndExit;
    out.print = app.version() + "\n";
    return out;
  } catch (const CLI::ParseError& e) {
    std::string msg = e.what();
    return error_of(ErrorKind::kUsage, msg + " (see 'hvdrun --help')");
  }

  // As horovodrun: the flags set the workers' variables (ahead of -x, which can still
  // override them).
  if (!o.timeline_file.empty()) {
    if (o.timeline_file[0] != '/') {
      char cwd[4096];
      if (getcwd(cwd, sizeof cwd)) o.timeline_file = std::string(cwd) + "/" + o.timeline_file;
    }
    o.env.insert(o.env.begin(), "HVDRUN_TIMELINE=" + o.timeline_file);
  }
  if (mark_cycles) {
    if (o.timeline_file.empty() && tunable_string("HVDRUN_TIMELINE").empty())
      return error_of(ErrorKind::kUsage, "--timeline-mark-cycles needs --timeline-filename FILE (or HVDRUN_TIMELINE)");
    o.env.insert(o.env.begin(), "HVDRUN_TIMELINE_MARK_CYCLES=1");
  }
  if (hier_allgather)
    o.env.insert(o.env.begin(), {"HVDRUN_HIERARCHICAL_ALLGATHER=1", "HOROVOD_HIERARCHICAL_ALLGATHER=1"});
  if (hier_allreduce)
    o.env.insert(o.env.begin(), {"HVDRUN_HIERARCHICAL_ALLREDUCE=1", "HOROVOD_HIERARCHICAL_ALLREDUCE=1"});

  if (help_env) {
    out.action = ParsedCommandLine::Action::kPrintAndExit;
    out.print = environment_help();
    return out;
  }
  o.command = app.remaining();
  if (!o.command.empty() && o.command.front() == "--") {
    o.command.erase(o.command.begin());
  } else if (!o.command.empty() && o.command.front().size() > 1 && o.command.front()[0] == '-') {
    return error_of(ErrorKind::kUsage, "unknown option '" + o.command.front() + "' (see 'hvdrun --help'; put '--' before a command "
                          "that starts with '-')");
  }

  if (!np_s.empty()) {
    auto n = parse_int(np_s, "-np", 1, 1 << 24);
    if (!n) return n.error();
    o.np = static_cast<int>(*n);
  }
  if (start_timeout_s.empty()) start_timeout_s = tunable_string("HVDRUN_START_TIMEOUT");
  auto st = parse_double(start_timeout_s, "--start-timeout", 0.001, 1e7);
  if (!st) return st.error();
  o.start_timeout = *st;
  if (kill_grace_s.empty()) kill_grace_s = tunable_string("HVDRUN_KILL_GRACE");
  auto kg = parse_double(kill_grace_s, "--kill-grace", 0, 1e6);
  if (!kg) return kg.error();
  o.kill_grace = *kg;
  if (!ssh_port_s.empty()) {
    auto p = parse_int(ssh_port_s, "--ssh-port", 1, 65535);
    if (!p) return p.error();
    o.ssh_port = static_cast<int>(*p);
  }
  if (!rdv_port_s.empty()) {
    auto p = parse_int(rdv_port_s, "--rendezvous-port", 1, 65535);
    if (!p) return p.error();
    o.rendezvous_port = static_cast<int>(*p);
  }
  if (o.log_level.empty()) o.log_level = o.verbose ? "debug" : tunable_string("HVDRUN_LOG_LEVEL");
  if (o.command.empty()) return error_of(ErrorKind::kUsage, "missing command: usage: hvdrun [options] [--] command [args...]");
  if (!o.hosts.empty() && !o.hostfile.empty())
    return error_of(ErrorKind::kUsage, "-H/--hosts and --hostfile cannot be used together; give one of them");
  return out;
}

}  // namespace hvdrun
