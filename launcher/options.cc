#include "launcher/options.h"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>
#include <tuple>

#include "launcher/exit_status.h"
#include "launcher/launch_command.h"
#include "common/strings.h"
#include "common/tunables.h"
#include "hvdrun_version.h"

namespace hvdrun {
namespace {

constexpr const char* kDescription =
    "hvdrun: launch a distributed training job (horovodrun/mpirun compatible).\n"
    "Usage: hvdrun [options] [--] command [args...]";

// Horovod's tuning and library flags (horovodrun, horovod/runner/launch.py): each sets a
// worker variable, and is read from --config-file's SECTION.KEY when not on the command line.
struct HorovodFlag {
  const char* name;     // "--fusion-threshold-mb"
  enum Kind { kInt, kFloat, kString, kTrue, kFalse } kind;
  const char* env;      // the worker variable it sets; "" for none
  const char* section;  // --config-file: section and key ("" for none)
  const char* key;
  long long scale = 1;  // kInt: the value times this (MB -> bytes)
};

const std::vector<HorovodFlag>& horovod_flags() {
  using F = HorovodFlag;
  static const std::vector<HorovodFlag> flags = {
      {"--fusion-threshold-mb", F::kInt, "HOROVOD_FUSION_THRESHOLD", "params", "fusion_threshold_mb", 1 << 20},
      {"--cycle-time-ms", F::kFloat, "HOROVOD_CYCLE_TIME", "params", "cycle_time_ms"},
      {"--cache-capacity", F::kInt, "HOROVOD_CACHE_CAPACITY", "params", "cache_capacity"},
      {"--autotune", F::kTrue, "HOROVOD_AUTOTUNE", "autotune", "enabled"},
      {"--no-autotune", F::kFalse, "HOROVOD_AUTOTUNE", "", ""},
      {"--autotune-log-file", F::kString, "HOROVOD_AUTOTUNE_LOG", "autotune", "log_file"},
      {"--autotune-warmup-samples", F::kInt, "HOROVOD_AUTOTUNE_WARMUP_SAMPLES", "autotune", "warmup_samples"},
      {"--autotune-steps-per-sample", F::kInt, "HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE", "autotune", "steps_per_sample"},
      {"--autotune-bayes-opt-max-samples", F::kInt, "HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES", "autotune",
       "bayes_opt_max_samples"},
      {"--autotune-gaussian-process-noise", F::kFloat, "HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE", "autotune",
       "gaussian_process_noise"},
      {"--no-stall-check", F::kTrue, "HOROVOD_STALL_CHECK_DISABLE", "", ""},
      {"--stall-check", F::kFalse, "HOROVOD_STALL_CHECK_DISABLE", "", ""},
      {"--stall-check-warning-time-seconds", F::kInt, "HOROVOD_STALL_CHECK_TIME_SECONDS", "stall_check",
       "warning_time_seconds"},
      {"--stall-check-shutdown-time-seconds", F::kInt, "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "stall_check",
       "shutdown_time_seconds"},
      {"--mpi-threads-disable", F::kTrue, "HOROVOD_MPI_THREADS_DISABLE", "library_options", "mpi_threads_disable"},
      {"--no-mpi-threads-disable", F::kFalse, "HOROVOD_MPI_THREADS_DISABLE", "", ""},
      {"--num-nccl-streams", F::kInt, "HOROVOD_NUM_NCCL_STREAMS", "library_options", "num_nccl_streams"},
      {"--ccl-bgt-affinity", F::kInt, "HOROVOD_CCL_BGT_AFFINITY", "library_options", "ccl_bgt_affinity"},
      {"--thread-affinity", F::kInt, "HOROVOD_THREAD_AFFINITY", "", ""},
      {"--gloo-timeout-seconds", F::kInt, "HOROVOD_GLOO_TIMEOUT_SECONDS", "library_options", "gloo_timeout_seconds"},
      {"--log-with-timestamp", F::kFalse, "HOROVOD_LOG_HIDE_TIME", "", ""},
      {"--log-without-timestamp", F::kTrue, "HOROVOD_LOG_HIDE_TIME", "logging", "hide_timestamp"},
      {"--log-hide-timestamp", F::kTrue, "HOROVOD_LOG_HIDE_TIME", "", ""},
      {"--no-log-hide-timestamp", F::kFalse, "HOROVOD_LOG_HIDE_TIME", "", ""},
      {"--mpi-args", F::kString, "", "", ""},
      {"--binding-args", F::kString, "", "", ""},
  };
  return flags;
}

// Elastic training (horovodrun --min-np ...): refused, not ignored.
const char* const kElasticFlags[] = {"--min-np", "--min-num-proc", "--max-np", "--max-num-proc", "--slots-per-host",
                                     "--elastic-timeout", "--reset-limit", "--blacklist-cooldown-range",
                                     "--host-discovery-script"};

// libhvdrun reads this variable (by our name or as Horovod's alias).
bool runtime_reads(std::string_view env) {
  for (const auto& t : all_tunables())
    if (t.env == env || t.horovod == env) return true;
  return false;
}

// horovodrun's log levels too, in any case: WARNING is warn, FATAL critical.
std::string normalize_log_level(std::string v) {
  for (auto& c : v) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (v == "warning") return "warn";
  if (v == "fatal") return "critical";
  return v;
}

std::string check_build_text() {
  auto mark = [](bool b) { return b ? "    [X] " : "    [ ] "; };
  std::string backend = HVDRUN_GPU_BACKEND_NAME;
  std::string t = std::string("hvdrun v") + HVDRUN_VERSION_STRING + ":\n\n";
  t += "Available Frameworks:\n";
  t += std::string(mark(true)) + "PyTorch (hvdrun.torch; horovod.torch with --horovod-compat)\n";
  t += std::string(mark(true)) + "NumPy (hvdrun.numpy)\n";
  t += "\nAvailable Controllers:\n";
  t += std::string(mark(false)) + "MPI\n";
  t += std::string(mark(true)) + "Gloo (hvdrun's own TCP rendezvous, same flags)\n";
  t += "\nAvailable Tensor Operations:\n";
  t += std::string(mark(backend == "nccl")) + "NCCL\n";
  t += std::string(mark(backend != "none")) + "CUDA\n";
  t += std::string(mark(true)) + "TCP\n";
  t += std::string(mark(true)) + "Shared memory (ranks of one host)\n";
  t += std::string(mark(false)) + "MPI\n";
  t += "\nPython bindings: " + std::string(HVDRUN_PYTHON_BINDINGS ? "built (pip install . or cmake --install)" : "not built") + "\n";
  return t;
}

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

// Horovod's --config-file (horovod/runner/common/util/config_parser.py): sections of
// keys, each the same as a flag. Returns flag -> value ("1"/"0" for booleans).
Result<std::vector<std::pair<std::string, std::string>>> read_config_file(const std::string& path) {
  auto fail = [&](const std::string& why) {
    return error_of(ErrorKind::kUsage, "--config-file '" + printable(path) + "': " + why);
  };
  std::error_code ec;
  auto st = std::filesystem::status(path, ec);
  if (ec) return fail(ec.message());
  if (!std::filesystem::is_regular_file(st)) return fail("not a regular file");
  if (std::filesystem::file_size(path, ec) > kMaxConfigBytes) return fail("larger than 1 MiB");
  std::ifstream in(path, std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in.good() && !in.eof()) return fail("cannot be read");
  return parse_config_text(text, "--config-file '" + printable(path) + "'");
}

Result<std::vector<std::pair<std::string, std::string>>> parse_config_text(std::string_view text,
                                                                           const std::string& what) {
  // yaml-cpp's messages quote the input's bytes at times: one printable line, always.
  auto fail = [&](const std::string& why) { return error_of(ErrorKind::kUsage, what + ": " + printable(why, 300, true)); };
  if (text.size() > kMaxConfigBytes) return fail("larger than 1 MiB");
  YAML::Node root;
  try {
    root = YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    return fail(std::string("not YAML: ") + e.what());
  }
  std::vector<std::pair<std::string, std::string>> out;
  if (root.IsNull()) return out;
  if (!root.IsMap()) return fail("expected sections (params, autotune, timeline, stall_check, library_options, logging)");
  // Keys whose flags belong to other parts of hvdrun.
  static const std::map<std::string, std::pair<std::string, char>> kOther = {
      {"params.hierarchical_allreduce", {"--hierarchical-allreduce", 'b'}},
      {"params.hierarchical_allgather", {"--hierarchical-allgather", 'b'}},
      {"timeline.filename", {"--timeline-filename", 's'}},
      {"timeline.mark_cycles", {"--timeline-mark-cycles", 'b'}},
      {"stall_check.enabled", {"--stall-check", 'b'}},
      {"logging.level", {"--log-level", 's'}},
  };
  try {
    for (const auto& sec : root) {
      std::string section = sec.first.as<std::string>();
      if (!sec.second.IsMap()) return fail("section '" + section + "': expected keys and values");
      for (const auto& kv : sec.second) {
        std::string key = kv.first.as<std::string>(), name = section + "." + key;
        if (!kv.second.IsScalar()) return fail("'" + name + "': expected a value");
        const HorovodFlag* flag = nullptr;
        for (const auto& f : horovod_flags())
          if (section == f.section && key == f.key) flag = &f;
        char type = 's';
        std::string flag_name;
        if (flag) {
          flag_name = flag->name;
          type = flag->kind == HorovodFlag::kTrue || flag->kind == HorovodFlag::kFalse ? 'b' : 's';
        } else if (auto it = kOther.find(name); it != kOther.end()) {
          flag_name = it->second.first;
          type = it->second.second;
        } else {
          return fail("unknown key '" + name + "'");
        }
        std::string value;
        if (type == 'b') {
          bool b;
          if (!YAML::convert<bool>::decode(kv.second, b)) return fail("'" + name + "': expected true or false");
          value = b ? "1" : "0";
        } else {
          value = kv.second.as<std::string>();
        }
        out.emplace_back(flag_name, value);
      }
    }
  } catch (const YAML::Exception& e) {
    return fail(e.what());
  }
  return out;
}

Result<ParsedCommandLine> parse_command_line(const std::vector<std::string>& args_in) {
  ParsedCommandLine out;
  LaunchOptions& o = out.options;
  std::string np_s, start_timeout_s, kill_grace_s, ssh_port_s, rdv_port_s;

  CLI::App app{kDescription, "hvdrun"};
  app.prefix_command();  // the first positional starts the command; the rest is its own
  app.set_version_flag("-v,--version", std::string("hvdrun ") + HVDRUN_VERSION_STRING);
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
      ->transform([](std::string v) {
        std::string n = normalize_log_level(v);
        for (const char* l : {"trace", "debug", "info", "warn", "error", "critical", "off"})
          if (n == l) return n;
        throw CLI::ValidationError("--log-level", "'" + v + "': expected trace, debug, info, warn(ing), error, "
                                                  "critical/fatal or off (any case)");
      });
  app.add_flag("--dry-run", o.dry_run, "Print the plan, one JSON object per rank, and start nothing");
  app.add_flag("--horovod-compat", o.horovod_compat,
               "Put a 'horovod' package first on the workers' PYTHONPATH (horovod.torch = hvdrun.torch), "
               "unless a real Horovod is importable");
  bool horovod_flag = false;
  app.add_flag("--horovod", horovod_flag,
               "Serve Horovod's own Gloo rendezvous, so that programs using a real Horovod 0.28.1 "
               "(import horovod.torch) run unchanged (env HVDRUN_HOROVOD=1)");
  // horovodrun's other spellings (horovod/runner/launch.py).
  bool check_build = false, disable_cache = false, use_gloo = false, use_tcp = false, use_mpi = false,
       use_jsrun = false;
  std::string nics, config_file;
  app.add_flag("--check-build", check_build, "(-cb) Print what this build has (TCP, shared memory, NCCL, CUDA, "
                                             "Python bindings) and exit");
  app.add_flag("--disable-cache", disable_cache, "Accepted for horovodrun: hvdrun keeps no cache of its checks");
  app.add_option("--network-interfaces", nics, "Comma list of interfaces (horovodrun); hvdrun uses the first")
      ->type_name("IFACE,...");
  app.add_option("--config-file", config_file,
                 "YAML file of Horovod's parameters, as horovodrun's (params, autotune, timeline, stall_check, "
                 "library_options, logging); command-line flags win")
      ->type_name("FILE");
  app.add_flag("--gloo", use_gloo, "Accepted: hvdrun's controller is Gloo-like (TCP rendezvous)");
  app.add_flag("--tcp", use_tcp, "Use only TCP between ranks, no shared memory (HVDRUN_SHM=0)");
  app.add_flag("--mpi", use_mpi, "Refused: hvdrun has no MPI controller");
  app.add_flag("--jsrun", use_jsrun, "Refused: hvdrun has no jsrun launcher");
  std::map<std::string, std::string> hflag_values;  // value flags given
  std::map<std::string, bool> hflag_set;            // boolean flags given
  for (const auto& f : horovod_flags()) {
    std::string env = *f.env ? std::string(f.env) : std::string("nothing");
    if (f.kind == HorovodFlag::kTrue || f.kind == HorovodFlag::kFalse)
      app.add_flag(f.name, hflag_set[f.name], std::string("Horovod: sets ") + env + "=" +
                                                  (f.kind == HorovodFlag::kTrue ? "1" : "0") + " for the workers")
          ->group("Horovod tuning (horovodrun's flags)");
    else
      app.add_option(f.name, hflag_values[f.name], std::string("Horovod: sets ") + env + " for the workers")
          ->type_name(f.kind == HorovodFlag::kString ? "TEXT" : "N")
          ->group("Horovod tuning (horovodrun's flags)");
  }
  std::map<std::string, std::string> elastic_values;
  std::vector<std::string> cooldown_range;
  for (const char* e : kElasticFlags) {
    if (std::string(e) == "--blacklist-cooldown-range")
      app.add_option(e, cooldown_range, "Refused: elastic training is not supported yet")
          ->expected(2)
          ->allow_extra_args(false)
          ->group("Horovod elastic (not supported)");
    else
      app.add_option(e, elastic_values[e], "Refused: elastic training is not supported yet")
          ->group("Horovod elastic (not supported)");
  }
  bool help_env = false;
  app.add_flag("--help-env", help_env, "List every environment variable hvdrun and libhvdrun read or set, and exit");

  // Horovod's and mpirun's single-dash "-np" is not a CLI11 short option: rewrite it, but
  // only before the command (the command's own "-np" is its business).
  std::vector<std::string> args = args_in;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--" || a.empty() || a[0] != '-') break;
    // horovodrun's single-dash long names; any other single-dash word longer than one
    // option letter is refused (CLI11 would read "-hostfile" as -h, "-prefix-timestamp"
    // as -p refix-timestamp), except a value glued to an option that takes one (-xA=1).
    static const std::pair<const char*, const char*> kSingleDash[] = {
        {"-np", "--num-proc"}, {"-n", "--num-proc"}, {"-hostfile", "--hostfile"},
        {"-prefix-timestamp", "--prefix-output-with-timestamp"}, {"-cb", "--check-build"}};
    bool rewritten = false;
    for (const auto& [from, to] : kSingleDash) {
      std::string f = from;
      if (a == f) {
        args[i] = to;
        rewritten = true;
      } else if (starts_with(a, f + "=")) {
        args[i] = std::string(to) + a.substr(f.size());
        rewritten = true;
      }
      if (rewritten) break;
    }
    if (!rewritten && a.size() > 2 && a[1] != '-' && std::string("xHpi").find(a[1]) == std::string::npos)
      return error_of(ErrorKind::kUsage, "unknown option '" + a + "' (see 'hvdrun --help')");
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

  auto given = [&app](const char* name) { return app.get_option(name)->count() > 0; };
  for (const char* e : kElasticFlags)
    if (given(e))
      return error_of(ErrorKind::kUsage, std::string(e) + ": elastic training (--min-np, --max-np, "
                                         "--host-discovery-script, ...) is not supported yet; run a fixed -np");
  if (use_mpi || use_jsrun)
    return error_of(ErrorKind::kUsage, std::string(use_mpi ? "--mpi" : "--jsrun") +
                                           ": not supported: hvdrun has its own TCP controller (as --gloo); drop "
                                           "the flag, or use mpirun with an MPI build of Horovod");
  if (check_build) {
    out.action = ParsedCommandLine::Action::kPrintAndExit;
    out.print = check_build_text();
    return out;
  }
  (void)disable_cache;  // nothing is cached
  (void)use_gloo;       // what hvdrun does anyway

  // --config-file: Horovod's YAML; what the command line gives wins.
  std::map<std::string, std::string> from_config;  // flag -> value ("1"/"0" for booleans)
  if (!config_file.empty()) {
    auto cfg = read_config_file(config_file);
    if (!cfg) return cfg.error();
    for (const auto& [flag, value] : *cfg) {
      if (app.get_option_no_throw(flag) && given(flag.c_str())) continue;
      if (flag == "--timeline-filename") o.timeline_file = value;
      else if (flag == "--timeline-mark-cycles") mark_cycles = value == "1";
      else if (flag == "--hierarchical-allreduce") hier_allreduce = value == "1";
      else if (flag == "--hierarchical-allgather") hier_allgather = value == "1";
      else if (flag == "--log-level") {
        o.log_level = normalize_log_level(value);
        for (const char* l : {"trace", "debug", "info", "warn", "error", "critical", "off"})
          if (o.log_level == l) goto level_ok;
        return error_of(ErrorKind::kUsage, "--config-file " + config_file + ": logging.level '" + value +
                                               "': expected trace, debug, info, warning, error or fatal");
      level_ok:;
      } else if (flag == "--stall-check") {  // stall_check.enabled
        if (!given("--no-stall-check") && !given("--stall-check")) from_config["--no-stall-check"] = value == "1" ? "0" : "1";
      } else {
        from_config[flag] = value;
      }
    }
  }

  // Horovod's flags set the workers' variables (ahead of -x, which can still override
  // them); one warning names those the runtime does not act on yet.
  std::vector<std::string> hflag_env, not_acted;
  for (const auto& f : horovod_flags()) {
    std::string value;
    bool is_bool = f.kind == HorovodFlag::kTrue || f.kind == HorovodFlag::kFalse;
    if (given(f.name)) {
      value = is_bool ? (f.kind == HorovodFlag::kTrue ? "1" : "0") : hflag_values[f.name];
    } else if (auto it = from_config.find(f.name); it != from_config.end()) {
      value = it->second;
      if (is_bool && f.kind == HorovodFlag::kFalse) value = value == "1" ? "0" : "1";
    } else {
      continue;
    }
    if (f.kind == HorovodFlag::kInt) {
      auto n = parse_int(value, f.name, 0, (1LL << 40) / f.scale);
      if (!n) return n.error();
      value = std::to_string(*n * f.scale);
    } else if (f.kind == HorovodFlag::kFloat) {
      auto d = parse_double(value, f.name, 0, 1e9);
      if (!d) return d.error();
    }
    if (*f.env) hflag_env.push_back(std::string(f.env) + "=" + value);
    if (!*f.env || !runtime_reads(f.env)) not_acted.push_back(f.name);
  }
  if (!not_acted.empty()) {
    std::string list;
    for (const auto& n : not_acted) list += (list.empty() ? "" : ", ") + n;
    out.warnings.push_back(list + ": accepted, but hvdrun's runtime does not act on " +
                           (not_acted.size() == 1 ? "it" : "them") + " yet");
  }
  o.env.insert(o.env.begin(), hflag_env.begin(), hflag_env.end());
  if (use_tcp) o.env.insert(o.env.begin(), "HVDRUN_SHM=0");
  if (!nics.empty()) {
    auto list = split(nics, ',');
    if (list.empty() || list[0].empty())
      return error_of(ErrorKind::kUsage, "--network-interfaces '" + nics + "': expected IFACE[,IFACE...]");
    if (o.network_interface.empty()) {
      o.network_interface = list[0];
      if (list.size() > 1)
        out.warnings.push_back("--network-interfaces " + nics + ": hvdrun uses one interface, " + list[0]);
    }
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
    // (or a timeline set for the workers alone: -x HVDRUN_TIMELINE=FILE, HOROVOD_TIMELINE=FILE)
    auto x_sets = [&](const std::string& var) {
      return std::any_of(o.env.begin(), o.env.end(),
                         [&](const std::string& e) { return e.size() > var.size() + 1 && e.rfind(var + "=", 0) == 0; });
    };
    if (o.timeline_file.empty() && tunable_string("HVDRUN_TIMELINE").empty() && !x_sets("HVDRUN_TIMELINE") &&
        !x_sets("HOROVOD_TIMELINE"))
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
  // The environment's settings, hvdrun's and the workers' alike, before anything starts.
  for (auto use : {TunableUse::kLauncher, TunableUse::kWorker})
    if (auto s = check_tunables(use); !s) return s.error();
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
  if (horovod_flag) {
    o.horovod = true;
  } else {
    std::string h = tunable_string("HVDRUN_HOROVOD");
    if (h == "1") o.horovod = true;
    else if (h != "0" && !h.empty())
      return error_of(ErrorKind::kUsage, "HVDRUN_HOROVOD '" + printable(h, 32) + "': expected 0 or 1");
  }
  // A template or client given empty fell back to SSH (libssh) without a word.
  const std::tuple<const char*, const std::string*, const char*> commands[] = {
      {"--launch-command", &o.launch_command, "a command template, e.g. 'kubectl exec -i {host} --'"},
      {"--ssh-command", &o.ssh_command, "a client command, e.g. 'ssh -o ProxyJump=gw'"}};
  for (auto [name, value, expected] : commands) {
    if (!given(name)) continue;
    if (value->find_first_not_of(" \t\n") == std::string::npos)
      return error_of(ErrorKind::kUsage, std::string(name) + " '" + printable(*value) + "': expected " + expected);
    if (auto words = split_command_line(*value, name); !words) return words.error();
  }
  if (o.command.empty()) return error_of(ErrorKind::kUsage, "missing command: usage: hvdrun [options] [--] command [args...]");
  if (!o.hosts.empty() && !o.hostfile.empty())
    return error_of(ErrorKind::kUsage, "-H/--hosts and --hostfile cannot be used together; give one of them");
  return out;
}

}  // namespace hvdrun
