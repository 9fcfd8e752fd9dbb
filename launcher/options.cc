#include "launcher/options.h"

#include <unistd.h>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cctype>
#include <map>
#include <memory>
#include <tuple>

#include "launcher/elastic_options.h"
#include "launcher/exit_status.h"
#include "launcher/horovod_flags.h"
#include "launcher/hosts.h"
#include "launcher/launch_command.h"
#include "launcher/placement.h"
#include "common/strings.h"
#include "common/tunables.h"
#include "hvdrun_version.h"

namespace hvdrun {
namespace {

constexpr const char* kDescription =
    "hvdrun: launch a distributed training job (horovodrun/mpirun compatible).\n"
    "Usage: hvdrun [options] [--] command [args...]";

// horovodrun's log levels too, in any case: WARNING is warn, FATAL critical.
std::string normalize_log_level(std::string v) {
  for (auto& c : v) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (v == "warning") return "warn";
  if (v == "fatal") return "critical";
  return v;
}

bool is_log_level(const std::string& v) {
  for (const char* l : {"trace", "debug", "info", "warn", "error", "critical", "off"})
    if (v == l) return true;
  return false;
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

namespace {

// What the command line gives besides LaunchOptions' own fields: texts still to parse and
// flags still to resolve (bound to CLI11's options).
struct CliValues {
  std::string np, start_timeout, kill_grace, ssh_port, rendezvous_port, nics, config_file;
  bool mark_cycles = false, hier_allreduce = false, hier_allgather = false, horovod = false;
  bool check_build = false, disable_cache = false, use_gloo = false, use_tcp = false, use_mpi = false,
       use_jsrun = false, help_env = false;
  HorovodFlagValues horovod_flags;
  ElasticFlagValues elastic;
};

// --- The CLI11 spec, in the order --help lists it.

// Where the job runs and how hvdrun reaches it.
void add_host_options(CLI::App& app, LaunchOptions& o, CliValues& v) {
  app.add_option("--num-proc", v.np, "Number of processes (-np N); default: every slot of the hosts")->type_name("N");
  app.add_option("-H,--hosts", o.hosts, "Hosts and slots: host:slots,... (a bare host is one slot)")
      ->type_name("LIST");
  app.add_option("--hostfile", o.hostfile, "File of hosts: 'host slots=N', 'host:N' or 'host' per line")
      ->type_name("FILE");
  app.add_option("-p,--ssh-port", v.ssh_port, "SSH port of the remote hosts")->type_name("PORT");
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
  app.add_option("--start-timeout", v.start_timeout,
                 "Seconds for every rank to start and reach the rendezvous (env HVDRUN_START_TIMEOUT; default 30)")
      ->type_name("SECONDS");
  app.add_option("--kill-grace", v.kill_grace, "Seconds between SIGTERM and SIGKILL at teardown (default 5)")
      ->type_name("SECONDS");
  app.add_option("--bind-to", o.bind_to,
                 "Bind each rank: auto (default: its GPU's NUMA node, else its own core when the ranks fit "
                 "the cores, else nothing), none, core, socket, numa, gpu")
      ->type_name("WHAT")
      ->check(CLI::IsMember({"auto", "none", "core", "socket", "package", "numa", "gpu"}));
  app.add_option("--network-interface", o.network_interface, "Network interface for the rendezvous and data plane")
      ->type_name("IFACE");
  app.add_option("--rendezvous-port", v.rendezvous_port, "Port of the rendezvous server (default: chosen by the OS)")
      ->type_name("PORT");
}

// What the workers get (variables, output, the timeline) and hvdrun's own logging.
void add_worker_options(CLI::App& app, LaunchOptions& o, CliValues& v) {
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
  app.add_flag("--timeline-mark-cycles", v.mark_cycles,
               "Mark the engine's negotiation cycles in the timeline (HVDRUN_TIMELINE_MARK_CYCLES=1)");
  app.add_flag("--hierarchical-allreduce", v.hier_allreduce,
               "Allreduce within each host over shared memory and between hosts over TCP "
               "(HOROVOD_HIERARCHICAL_ALLREDUCE=1 for the workers; default: auto)");
  app.add_flag("--hierarchical-allgather", v.hier_allgather,
               "Allgather between hosts, then within each host (HOROVOD_HIERARCHICAL_ALLGATHER=1; default: auto)");
  app.add_flag("--verbose", o.verbose, "Log what hvdrun does (same as --log-level debug)");
  app.add_option("--log-level", o.log_level, "trace, debug, info, warn, error or off (env HVDRUN_LOG_LEVEL)")
      ->type_name("LEVEL")
      ->transform([](std::string l) {
        std::string n = normalize_log_level(l);
        if (is_log_level(n)) return n;
        throw CLI::ValidationError("--log-level", "'" + l + "': expected trace, debug, info, warn(ing), error, "
                                                  "critical/fatal or off (any case)");
      });
  app.add_flag("--dry-run", o.dry_run, "Print the plan, one JSON object per rank, and start nothing");
  app.add_flag("--check", o.check,
               "Compare the hosts (hvdrun, GPUs, named interfaces, Python and torch, limits, clocks), print "
               "one row per host and start nothing; exit 0 if they can run the job together");
  app.add_flag("--no-preflight", o.no_preflight, "Launch without the pre-flight check of the hosts");
  app.add_flag("--horovod-compat", o.horovod_compat,
               "Put a 'horovod' package first on the workers' PYTHONPATH (horovod.torch = hvdrun.torch), "
               "unless a real Horovod is importable");
  app.add_flag("--horovod", v.horovod,
               "Serve Horovod's own Gloo rendezvous, so that programs using a real Horovod 0.28.1 "
               "(import horovod.torch) run unchanged (env HVDRUN_HOROVOD=1)");
}

// horovodrun's other spellings (horovod/runner/launch.py), its tuning flags and --help-env.
void add_horovodrun_options(CLI::App& app, CliValues& v) {
  app.add_flag("--check-build", v.check_build, "(-cb) Print what this build has (TCP, shared memory, NCCL, CUDA, "
                                               "Python bindings) and exit");
  app.add_flag("--disable-cache", v.disable_cache, "Accepted for horovodrun: hvdrun keeps no cache of its checks");
  app.add_option("--network-interfaces", v.nics, "Comma list of interfaces (horovodrun); hvdrun uses the first")
      ->type_name("IFACE,...");
  app.add_option("--config-file", v.config_file,
                 "YAML file of Horovod's parameters, as horovodrun's (params, autotune, timeline, stall_check, "
                 "library_options, logging); command-line flags win")
      ->type_name("FILE");
  app.add_flag("--gloo", v.use_gloo, "Accepted: hvdrun's controller is Gloo-like (TCP rendezvous)");
  app.add_flag("--tcp", v.use_tcp, "Use only TCP between ranks, no shared memory (HVDRUN_SHM=0)");
  app.add_flag("--mpi", v.use_mpi, "Refused: hvdrun has no MPI controller");
  app.add_flag("--jsrun", v.use_jsrun, "Refused: hvdrun has no jsrun launcher");
  add_horovod_flags(app, v.horovod_flags);
  add_elastic_flags(app, v.elastic);
  app.add_flag("--help-env", v.help_env, "List every environment variable hvdrun and libhvdrun read or set, and exit");
}

// --- --help in horovodrun's groups (horovod/runner/launch.py's argument groups), in this
// order; an option named nowhere stays in the group add_horovod_flags gave it (tuning or
// elastic). GroupedHelp prints every group, listed here or not: no option can drop out.
struct HelpGroup {
  const char* title;
  std::vector<std::string_view> options;  // by CLI11's name: the first long name
};
const HelpGroup kHelpGroups[] = {
    {"Launch", {"--help", "--version", "--num-proc", "--hosts", "--hostfile", "--launcher", "--launch-command",
                "--remote-hvdrun", "--env", "--start-timeout", "--kill-grace", "--bind-to", "--network-interface",
                "--network-interfaces", "--rendezvous-port", "--config-file", "--dry-run", "--check", "--no-preflight",
                "--check-build",
                "--disable-cache", "--help-env"}},
    {"SSH", {"--ssh-port", "--ssh-identity-file", "--ssh-host-key-checking", "--ssh-command"}},
    {"Controller and Horovod compatibility",
     {"--gloo", "--tcp", "--mpi", "--jsrun", "--horovod", "--horovod-compat", "--mpi-args", "--binding-args"}},
    {"Elastic", {}},
    {"Tuning", {"--hierarchical-allreduce", "--hierarchical-allgather"}},
    {"Timeline", {"--timeline-filename", "--timeline-mark-cycles"}},
    {"Logging and output", {"--verbose", "--log-level", "--output-filename", "--prefix-output-with-timestamp",
                            "--nccl-debug", "--log-with-timestamp", "--log-without-timestamp",
                            "--log-hide-timestamp", "--no-log-hide-timestamp"}},
};

class GroupedHelp : public CLI::Formatter {
 public:
  std::string make_help(const CLI::App* app, std::string, CLI::AppFormatMode) const override {
    std::vector<std::string> titles;
    for (const auto& g : kHelpGroups) titles.push_back(g.title);
    for (const auto& g : app->get_groups())
      if (std::find(titles.begin(), titles.end(), g) == titles.end()) titles.push_back(g);
    std::string out = make_description(app);
    for (const auto& title : titles) {
      auto opts = app->get_options([&](const CLI::Option* o) { return o->get_group() == title; });
      if (!opts.empty()) out += make_group(title, false, opts);
    }
    return out;
  }
};

void group_for_help(CLI::App& app) {
  for (CLI::Option* opt : app.get_options()) {
    if (opt->get_group() == "Horovod tuning (horovodrun's flags)") opt->group("Tuning");
    for (const auto& g : kHelpGroups)
      if (std::find(g.options.begin(), g.options.end(), opt->get_name()) != g.options.end()) opt->group(g.title);
  }
  auto help = std::make_shared<GroupedHelp>();
  help->column_width(36);
  app.formatter(help);
}

void add_options(CLI::App& app, LaunchOptions& o, CliValues& v) {
  app.prefix_command();  // the first positional starts the command; the rest is its own
  app.set_version_flag("-v,--version", std::string("hvdrun ") + HVDRUN_VERSION_STRING);
  add_host_options(app, o, v);
  add_worker_options(app, o, v);
  add_horovodrun_options(app, v);
  group_for_help(app);
}

// --- Single-dash rewriting.

// Horovod's and mpirun's single-dash "-np" is not a CLI11 short option: rewrite it, but
// only before the command (the command's own "-np" is its business). horovodrun's
// single-dash long names are rewritten; any other single-dash word longer than one option
// letter is refused (CLI11 would read "-hostfile" as -h, "-prefix-timestamp" as
// -p refix-timestamp), except a value glued to an option that takes one (-xA=1).
Result<std::vector<std::string>> rewrite_single_dash(const CLI::App& app, std::vector<std::string> args) {
  static const std::pair<std::string_view, std::string_view> kSingleDash[] = {
      {"-np", "--num-proc"}, {"-n", "--num-proc"}, {"-hostfile", "--hostfile"},
      {"-prefix-timestamp", "--prefix-output-with-timestamp"}, {"-cb", "--check-build"}};
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string a = args[i];
    if (a == "--" || a.empty() || a[0] != '-') break;
    bool rewritten = false;
    for (const auto& [from, to] : kSingleDash) {
      if (a == from) args[i] = to;
      else if (starts_with(a, std::string(from) + "=")) args[i] = std::string(to) + a.substr(from.size());
      else continue;
      rewritten = true;
      break;
    }
    if (!rewritten && a.size() > 2 && a[1] != '-' && std::string("xHpi").find(a[1]) == std::string::npos)
      return error_of(ErrorKind::kUsage, "unknown option '" + a + "' (see 'hvdrun --help')");
    if (args[i].find('=') != std::string::npos) continue;
    const CLI::Option* opt = app.get_option_no_throw(args[i]);
    if (opt && opt->get_type_size() > 0 && opt->get_expected_min() > 0) ++i;  // skip its value
  }
  return args;
}

// CLI11's parse; help and version are printed, not run. nullopt: parsed, go on.
Result<std::optional<std::string>> run_cli11(CLI::App& app, const std::vector<std::string>& args) {
  std::vector<std::string> rev(args.rbegin(), args.rend());
  try {
    app.parse(rev);
  } catch (const CLI::CallForHelp&) {
    return std::optional<std::string>(app.help());
  } catch (const CLI::CallForVersion&) {
    return std::optional<std::string>(app.version() + "\n");
  } catch (const CLI::ParseError& e) {
    return error_of(ErrorKind::kUsage, std::string(e.what()) + " (see 'hvdrun --help')");
  }
  return std::optional<std::string>();
}

// --- Horovod's flags and the YAML file.

bool given(const CLI::App& app, const std::string& name) { return app.get_option(name)->count() > 0; }

// --config-file: Horovod's YAML; what the command line gives wins. The flags of hvdrun's own
// options are applied here; Horovod's tuning flags are returned (flag -> value) for
// horovod_flag_env.
Result<std::map<std::string, std::string>> apply_config_file(const CLI::App& app, LaunchOptions& o, CliValues& v) {
  std::map<std::string, std::string> from_config;
  if (v.config_file.empty()) return from_config;
  auto cfg = read_config_file(v.config_file);
  if (!cfg) return cfg.error();
  for (const auto& [flag, value] : *cfg) {
    if (app.get_option_no_throw(flag) && given(app, flag)) continue;
    if (flag == "--timeline-filename") o.timeline_file = value;
    else if (flag == "--timeline-mark-cycles") v.mark_cycles = value == "1";
    else if (flag == "--hierarchical-allreduce") v.hier_allreduce = value == "1";
    else if (flag == "--hierarchical-allgather") v.hier_allgather = value == "1";
    else if (flag == "--log-level") {
      o.log_level = normalize_log_level(value);
      if (!is_log_level(o.log_level))
        return error_of(ErrorKind::kUsage, "--config-file " + v.config_file + ": logging.level '" + value +
                                               "': expected trace, debug, info, warning, error or fatal");
    } else if (flag == "--stall-check") {  // stall_check.enabled
      if (!given(app, "--no-stall-check") && !given(app, "--stall-check"))
        from_config["--no-stall-check"] = value == "1" ? "0" : "1";
    } else {
      from_config[flag] = value;
    }
  }
  return from_config;
}

// The refusals and the flags that only print (--mpi, --jsrun, --check-build).
// nullopt: go on.
Result<std::optional<std::string>> refuse_or_print(const CliValues& v) {
  if (v.use_mpi || v.use_jsrun)
    return error_of(ErrorKind::kUsage, std::string(v.use_mpi ? "--mpi" : "--jsrun") +
                                           ": not supported: hvdrun has its own TCP controller (as --gloo); drop "
                                           "the flag, or use mpirun with an MPI build of Horovod");
  if (v.check_build) return std::optional<std::string>(check_build_text());
  return std::optional<std::string>();
}

// As horovodrun: the flags set the workers' variables, ahead of -x (which can still
// override them).
Status apply_worker_flags(const CliValues& v, const std::vector<std::string>& horovod_env, ParsedCommandLine& out) {
  LaunchOptions& o = out.options;
  o.env.insert(o.env.begin(), horovod_env.begin(), horovod_env.end());
  if (v.use_tcp) o.env.insert(o.env.begin(), "HVDRUN_SHM=0");
  if (!v.nics.empty()) {
    auto list = split(v.nics, ',');
    if (list.empty() || list[0].empty())
      return error_of(ErrorKind::kUsage, "--network-interfaces '" + v.nics + "': expected IFACE[,IFACE...]");
    if (o.network_interface.empty()) {
      o.network_interface = list[0];
      if (list.size() > 1)
        out.warnings.push_back("--network-interfaces " + v.nics + ": hvdrun uses one interface, " + list[0]);
    }
  }
  if (!o.timeline_file.empty()) {
    if (o.timeline_file[0] != '/') {
      char cwd[4096];
      if (getcwd(cwd, sizeof cwd)) o.timeline_file = std::string(cwd) + "/" + o.timeline_file;
    }
    o.env.insert(o.env.begin(), "HVDRUN_TIMELINE=" + o.timeline_file);
  }
  if (v.mark_cycles) {
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
  if (v.hier_allgather)
    o.env.insert(o.env.begin(), {"HVDRUN_HIERARCHICAL_ALLGATHER=1", "HOROVOD_HIERARCHICAL_ALLGATHER=1"});
  if (v.hier_allreduce)
    o.env.insert(o.env.begin(), {"HVDRUN_HIERARCHICAL_ALLREDUCE=1", "HOROVOD_HIERARCHICAL_ALLREDUCE=1"});
  return {};
}

// --- Resolution: the command, the numbers, and what the environment supplies.

Status take_command(const CLI::App& app, LaunchOptions& o) {
  o.command = app.remaining();
  if (!o.command.empty() && o.command.front() == "--") {
    o.command.erase(o.command.begin());
  } else if (!o.command.empty() && o.command.front().size() > 1 && o.command.front()[0] == '-') {
    return error_of(ErrorKind::kUsage, "unknown option '" + o.command.front() +
                                           "' (see 'hvdrun --help'; put '--' before a command that starts with '-')");
  }
  return {};
}

// The numbers given as text; the environment's settings, hvdrun's and the workers' alike,
// checked before anything starts.
Status resolve_numbers(CliValues& v, LaunchOptions& o) {
  if (!v.np.empty()) {
    auto n = parse_int(v.np, "-np", 1, 1 << 24);
    if (!n) return n.error();
    o.np = static_cast<int>(*n);
  }
  for (auto use : {TunableUse::kLauncher, TunableUse::kWorker})
    if (auto s = check_tunables(use); !s) return s.error();
  if (v.start_timeout.empty()) v.start_timeout = tunable_string("HVDRUN_START_TIMEOUT");
  auto st = parse_double(v.start_timeout, "--start-timeout", 0.001, 1e7);
  if (!st) return st.error();
  o.start_timeout = *st;
  if (v.kill_grace.empty()) v.kill_grace = tunable_string("HVDRUN_KILL_GRACE");
  auto kg = parse_double(v.kill_grace, "--kill-grace", 0, 1e6);
  if (!kg) return kg.error();
  o.kill_grace = *kg;
  const std::tuple<const char*, const std::string&, int&> ports[] = {
      {"--ssh-port", v.ssh_port, o.ssh_port}, {"--rendezvous-port", v.rendezvous_port, o.rendezvous_port}};
  for (const auto& [name, text, port] : ports) {
    if (text.empty()) continue;
    auto p = parse_int(text, name, 1, 65535);
    if (!p) return p.error();
    port = static_cast<int>(*p);
  }
  return {};
}

// The log level and --horovod, from the command line or the environment; the command
// templates checked; what is missing or contradictory refused.
Status resolve_rest(const CLI::App& app, const CliValues& v, LaunchOptions& o) {
  if (o.log_level.empty()) o.log_level = o.verbose ? "debug" : tunable_string("HVDRUN_LOG_LEVEL");
  if (v.horovod) {
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
    if (!given(app, name)) continue;
    if (value->find_first_not_of(" \t\n") == std::string::npos)
      return error_of(ErrorKind::kUsage, std::string(name) + " '" + printable(*value) + "': expected " + expected);
    if (auto words = split_command_line(*value, name); !words) return words.error();
  }
  if (o.command.empty() && o.check) o.command = {"true"};  // --check alone: the hosts, no program
  if (o.command.empty()) return error_of(ErrorKind::kUsage, "missing command: usage: hvdrun [options] [--] command [args...]");
  if (!o.hosts.empty() && !o.hostfile.empty())
    return error_of(ErrorKind::kUsage, "-H/--hosts and --hostfile cannot be used together; give one of them");
  return {};
}

// The hosts -H names (elastic fault tolerance needs two); -1 when they come from elsewhere.
int count_fixed_hosts(const LaunchOptions& o) {
  if (o.hosts.empty()) return -1;
  auto hosts = parse_host_list(o.hosts);
  return hosts ? static_cast<int>(hosts->size()) : -1;
}

// Horovod's --binding-args (mpirun's binding flags there) as --bind-to; not both.
Status resolve_binding(const CLI::App& app, const CliValues& v, LaunchOptions& o) {
  if (!given(app, "--binding-args")) return {};
  if (given(app, "--bind-to"))
    return error_of(ErrorKind::kUsage, "--bind-to and --binding-args cannot be used together; give one of them");
  auto b = bind_to_of_binding_args(v.horovod_flags.values.at("--binding-args"));
  if (!b) return b.error();
  o.bind_to = bind_to_name(*b);
  return {};
}

ParsedCommandLine print_and_exit(std::string text) {
  ParsedCommandLine out;
  out.action = ParsedCommandLine::Action::kPrintAndExit;
  out.print = std::move(text);
  return out;
}

}  // namespace

// The CLI11 spec (add_options), single-dash rewriting, Horovod's flags and the YAML file,
// resolution: in that order, each step able to end the parse with an error or a text.
Result<ParsedCommandLine> parse_command_line(const std::vector<std::string>& args_in) {
  ParsedCommandLine out;
  LaunchOptions& o = out.options;
  CliValues v;
  CLI::App app{kDescription, "hvdrun"};
  add_options(app, o, v);
  auto args = rewrite_single_dash(app, args_in);
  if (!args) return args.error();
  auto printed = run_cli11(app, *args);
  if (!printed) return printed.error();
  if (*printed) return print_and_exit(**printed);
  printed = refuse_or_print(v);
  if (!printed) return printed.error();
  if (*printed) return print_and_exit(**printed);
  (void)v.disable_cache;  // nothing is cached
  (void)v.use_gloo;       // what hvdrun does anyway
  auto from_config = apply_config_file(app, o, v);
  if (!from_config) return from_config.error();
  auto horovod_env = horovod_flag_env(app, v.horovod_flags, *from_config, out.warnings);
  if (!horovod_env) return horovod_env.error();
  if (auto s = apply_worker_flags(v, *horovod_env, out); !s) return s.error();
  if (v.help_env) return print_and_exit(environment_help());
  if (auto s = take_command(app, o); !s) return s.error();
  if (auto s = resolve_numbers(v, o); !s) return s.error();
  if (auto s = resolve_rest(app, v, o); !s) return s.error();
  auto elastic = resolve_elastic(app, v.elastic, o.np, count_fixed_hosts(o));
  if (!elastic) return elastic.error();
  o.elastic = *elastic;
  // A real Horovod's elastic mode needs horovodrun's own driver service (its workers talk to
  // it, not to a store): hvdrun's elastic driver serves hvdrun.torch.elastic only.
  if (o.horovod && o.elastic.enabled)
    return error_of(ErrorKind::kUsage, "--horovod with elastic flags: a real Horovod's elastic mode needs horovodrun's "
                                       "driver; run the program with --horovod-compat (horovod.torch.elastic is then "
                                       "hvdrun.torch.elastic) or under horovodrun");
  if (auto s = resolve_binding(app, v, o); !s) return s.error();
  return out;
}

}  // namespace hvdrun
