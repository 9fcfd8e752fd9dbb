// The command line, parsed (CLI11) into plain values. Pure: no I/O beyond what it returns.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "launcher/elastic_options.h"

namespace hvdrun {

struct LaunchOptions {
  int np = 0;  // 0: every slot of the hosts given
  std::string hosts;
  std::string hostfile;
  int ssh_port = 0;
  std::string ssh_identity_file;
  std::string ssh_host_key_checking = "accept-new";  // yes, accept-new or no
  std::string ssh_command;                           // launch through this client instead of libssh
  std::string remote_hvdrun;                         // hvdrun on the remote hosts; "": our own path
  std::string launcher;        // --launcher slurm|ssh|local|command; "": chosen from the rest
  std::string launch_command;  // --launch-command: 'kubectl exec -i {host} --'
  double start_timeout = 30;
  double kill_grace = 5;
  std::string network_interface;
  std::string nccl_debug;  // NCCL_DEBUG for the workers; empty: leave it alone
  std::string output_dir;
  std::string timeline_file;  // --timeline-filename (absolute), else HVDRUN_TIMELINE
  bool timestamps = false;
  std::vector<std::string> env;  // -x specs
  bool verbose = false;
  std::string log_level;
  bool dry_run = false;
  bool check = false;         // --check: print the hosts' pre-flight table and start nothing
  bool no_preflight = false;  // --no-preflight: launch without comparing the hosts first
  std::string bind_to = "auto";  // --bind-to (or Horovod's --binding-args): placement.h's names
  bool horovod_compat = false;
  bool horovod = false;  // serve Horovod's Gloo rendezvous for a real Horovod (--horovod, HVDRUN_HOROVOD=1)  // a horovod shim (horovod.torch = hvdrun.torch) first on PYTHONPATH
  int rendezvous_port = 0;
  ElasticOptions elastic;  // --min-np, --host-discovery-script, ..., --max-restarts
  std::vector<std::string> command;
};

// What the command line asks for: run a job, or just print something and exit.
struct ParsedCommandLine {
  enum class Action { kRun, kPrintAndExit } action = Action::kRun;
  LaunchOptions options;
  std::string print;  // help or version text, for kPrintAndExit
  std::vector<std::string> warnings;  // one line each, for hvdrun to print before it runs
};

// In four parts (options.cc): the CLI11 spec, single-dash rewriting (-np, -hostfile),
// Horovod's flags and --config-file (horovod_flags.cc), and resolution, where the
// environment supplies what the command line does not (HVDRUN_START_TIMEOUT, ...).
// Errors carry exit code 2 and one line naming the bad value.
Result<ParsedCommandLine> parse_command_line(const std::vector<std::string>& args);

// The table of environment variables (common/tunables.cc), for --help-env.
std::string environment_help();

}  // namespace hvdrun
