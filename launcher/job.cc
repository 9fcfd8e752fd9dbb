#include "launcher/job.h"

#include "launcher/elastic_job.h"
#include "launcher/elastic_policy.h"
#include "launcher/elastic_start.h"
#include "launcher/timeline_merge.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <future>
#include <optional>
#include <memory>
#include <mutex>
#include <set>

#include <csignal>
#include <cstdlib>
#include <cstdio>
#include "common/log.h"

#include "launcher/exit_status.h"
#include "common/deadline.h"
#include "common/strings.h"
#include "common/tunables.h"
#include "common/unique_fd.h"
#include "rendezvous/auth.h"
#include "rendezvous/protocol.h"
#include "rendezvous/server.h"
#include "common/net.h"
#include "launcher/addressing.h"
#include "launcher/agent.h"
#include "launcher/local_host.h"
#include "launcher/remote_host.h"
#include "launcher/starter.h"
#include "launcher/log_sink.h"
#include "launcher/horovod_compat.h"
#include "launcher/host_preparation.h"
#include "launcher/job_preflight.h"
#include "launcher/output_sink.h"
#include "launcher/spawn.h"
#include "launcher/watchdog.h"

namespace hvdrun {
namespace {

int fail(const Error& e) {
  std::fprintf(stderr, "hvdrun: %s\n", e.message.c_str());
  return exit_code_for(e);
}

// Runs fn(i, host) for every remote host at once; the errors, one line each.
template <class Fn>
std::vector<Error> on_every_host(std::vector<std::unique_ptr<RemoteHost>>& hosts, Fn fn) {
  std::vector<std::future<Status>> futures;
  for (size_t i = 0; i < hosts.size(); ++i)
    futures.push_back(std::async(std::launch::async, [&hosts, &fn, i] { return fn(i, *hosts[i]); }));
  std::vector<Error> errors;
  for (auto& f : futures)
    if (auto s = f.get(); !s) errors.push_back(s.error());
  return errors;
}

// One line per failed host, then the count ("2 of 8 remote host(s) <what>").
int fail_all(const std::vector<Error>& errors, size_t hosts, const std::string& what) {
  for (const auto& e : errors) std::fprintf(stderr, "hvdrun: %s\n", e.message.c_str());
  std::fprintf(stderr, "hvdrun: %zu of %zu remote host(s) %s; nothing was started on any host\n", errors.size(), hosts,
               what.c_str());
  // The first host's kind decides.
  return exit_code_for(errors.front());
}

}  // namespace

namespace {

// One job from its options to its exit code, in steps (run() is their sequence). The
// members are what the steps make, declared in the order they are made, so that they go
// in the reverse one: the rendezvous server before the agent its callbacks use, the agent
// before the sink, the hosts' links before their starter, the watchdog (disarmed) last.
// A step returns nothing to go on, or the job's exit code (its error printed).
struct JobRun {
  using Stop = std::optional<int>;
  JobRun(const LaunchOptions& o, char** envp) : opts(o), launcher_env(environ_to_map(envp)) {}
  int run();
  Stop make_the_plan();
  Stop check_inputs();
  Stop prepare_this_host();
  Stop set_up_horovod_compat();
  Stop connect_remote_hosts();
  Stop check_the_hosts();
  Stop plan_the_addresses();
  Stop open_the_output();
  rdv::ServerCallbacks server_callbacks();
  Stop start_the_rendezvous();
  void make_launches();
  Stop prepare_remote_hosts();
  Stop check_the_python();
  int run_the_workers();
  SpawnRequest elastic_launch(const RankInfo& r, int round, const ElasticSlot& slot);
  AgentJob agent_job_for(const std::string& host) const;
  Result<std::unique_ptr<RemoteHost>> open_new_host(const std::string& host, const std::atomic<bool>& abort);
  Status admit_new_host(const RemoteHost& r);
  int merge_the_timeline(int code);

  const LaunchOptions& opts;
  std::map<std::string, std::string> launcher_env;
  std::optional<JobPlan> plan;
  JobHosts hosts;
  std::optional<HostKeyPolicy> policy;
  std::string timeline;
  std::string secret;
  JobEnv base;
  std::string iface_addr;
  std::string exe;
  std::optional<Watchdog> watchdog;
  // Every way out of here has ended every worker group first: the watchdog stands down.
  struct Disarm {
    std::optional<Watchdog>& w;
    ~Disarm() {
      if (w) w->disarm();
    }
  } disarm_on_return{watchdog};
  std::unique_ptr<AgentStarter> starter;  // before the hosts: it outlives their links
  RemoteSettings rs;
  std::vector<std::unique_ptr<RemoteHost>> remotes;
  double heartbeat_timeout = 0;
  AddressingInput ai;
  std::optional<Addressing> addressing;
  std::mutex new_host_mu;  // an elastic job's: ai, addressing and the pre-flight's, once its driver runs
  std::optional<std::unique_ptr<TaggedOutput>> sink;
  std::optional<ScopedJobLogger> job_logger;  // hvdrun's log lines queue behind the workers' output
  std::optional<OnceNoticeSink> job_sink;
  std::vector<std::string> rank_hosts;
  std::optional<LocalAgent> agent_;
  struct ClearReaderGone {
    std::optional<std::unique_ptr<TaggedOutput>>& s;
    ~ClearReaderGone() {
      if (!s) return;
      (*s)->on_reader_gone(nullptr);
      (*s)->on_file_failure(nullptr);
    }
  } clear_reader_gone{sink};
  std::unique_ptr<ElasticJob> elastic;  // an elastic job's driver (before the server: its callbacks use it)
  std::optional<std::unique_ptr<rdv::Server>> server;
  std::vector<WorkerLaunch> launches;
  std::vector<RankPlacement> placement;  // this machine's ranks, in launch order
  std::vector<AgentJob> jobs;
  RemoteHost* stdin_host = nullptr;
  std::optional<AgentResult> workers_result;  // once the workers ran (--max-restarts reads it)
  // The pre-flight check: every host's facts (in the plan's order), what the job asks.
  bool preflight = false;
  PreflightJob preflight_asks;
  std::vector<PreflightHost> preflight_hosts;
  std::future<PythonFacts> local_python;  // --check's
  std::optional<LatePythonCheck> late_python;  // a job's, once its workers run
  std::optional<PythonProbe> local_probe;
};

int JobRun::run() {
  if (auto stop = make_the_plan()) return *stop;
  hosts = split_hosts(*plan);
  if (auto stop = check_inputs()) return *stop;
  if (auto stop = prepare_this_host()) return *stop;
  if (auto stop = set_up_horovod_compat()) return *stop;
  if (auto stop = connect_remote_hosts()) return *stop;
  if (auto stop = check_the_hosts()) return *stop;
  if (auto stop = plan_the_addresses()) return *stop;
  if (auto stop = open_the_output()) return *stop;
  if (auto stop = start_the_rendezvous()) return *stop;
  make_launches();
  if (auto stop = prepare_remote_hosts()) return *stop;
  if (auto stop = check_the_python()) return *stop;
  return merge_the_timeline(run_the_workers());
}

// The plan (plan.h); --dry-run prints it, and that is all.
JobRun::Stop JobRun::make_the_plan() {
  auto made = make_plan(opts, launcher_env);
  if (!made) return fail(made.error());
  plan = std::move(*made);
  if (auto text = elastic_settings_text(opts.elastic); !text.empty()) {
    if (opts.dry_run) std::fprintf(stderr, "hvdrun: %s\n", text.c_str());
    else spdlog::info("{}", text);
  }
  if (opts.dry_run) {
    auto binding = dry_run_binding(*plan, opts.bind_to);
    if (!binding) return fail(binding.error());
    std::string text = dry_run_text(*plan, opts.command, *binding);
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
    if (size_t n = split_hosts(*plan).remote_names.size(); n > 0 && !opts.no_preflight)
      std::fprintf(stderr, "hvdrun: --dry-run: a launch would first compare the hosts (the pre-flight check, with %zu "
                   "remote host(s); --check prints it, --no-preflight skips it)\n", n);
    return 0;
  }
  return {};
}

// What the options name, before anything starts: the host-key policy, the timeline's
// paths, the network interface's address. Then the secret and the environment every
// rank shares.
JobRun::Stop JobRun::check_inputs() {
  auto parsed_policy = parse_host_key_policy(opts.ssh_host_key_checking);
  if (!parsed_policy) return fail(parsed_policy.error());
  policy = *parsed_policy;
  // The timeline's paths, before anything starts: nothing there is followed or overwritten.
  // The file is the one the workers write (-x may set it for them alone).
  timeline = worker_tunable(launcher_env, plan->env_overrides, "HVDRUN_TIMELINE");
  if (!timeline.empty())
    if (auto st = check_timeline_path(timeline, static_cast<int>(plan->ranks.size()),
                                      timeline == opts.timeline_file ? "--timeline-filename" : "HVDRUN_TIMELINE");
        !st)
      return fail(st.error());

  secret = rdv::new_secret();
  base.iface = opts.network_interface;
  base.nccl_debug = opts.nccl_debug;
  base.start_timeout = opts.start_timeout;
  base.secret_hex = to_hex(secret.data(), secret.size());
  if (!opts.network_interface.empty()) {
    auto a = interface_address(opts.network_interface);
    if (!a) return fail(error_of(ErrorKind::kUsage, "--network-interface: " + a.error().message));
    iface_addr = *a;
  }
  return {};
}

// This machine made ready (host_preparation.h, as every agent does on its host): the
// program resolved with the workers' PATH (when ranks run here), the process budget for
// the whole job, the watchdog.
JobRun::Stop JobRun::prepare_this_host() {
  HostNeed need;
  need.budget = budget_need(*plan, hosts);
  if (hosts.any_local) {
    auto first_env = build_worker_env(launcher_env, plan->env_overrides, base, plan->ranks[0], 0);
    need.program = opts.command[0];
    need.path = first_env.count("PATH") ? first_env.at("PATH") : "";
    need.bind_to = opts.bind_to;
  }
  auto prepared = prepare_host(need, opts.kill_grace);
  if (!prepared) return fail(prepared.error());
  exe = prepared->exe;
  placement = std::move(prepared->placement);
  watchdog.emplace(std::move(prepared->watchdog));
  return {};
}

// --horovod-compat: the shim first on PYTHONPATH, unless the workers' Python has a real Horovod.
JobRun::Stop JobRun::set_up_horovod_compat() {
  if (!opts.horovod_compat) return {};
  std::string shim = horovod_compat_dir_for(self_exe());
  if (auto ok = check_horovod_compat_dir(shim); !ok) return fail(ok.error());
  auto probe_env = env_to_strings(build_worker_env(launcher_env, plan->env_overrides, base, plan->ranks[0], 0));
  auto real = real_horovod_location(probe_python(opts.command), probe_env, shim, opts.start_timeout);
  if (!real) return fail(real.error());
  if (real->empty()) {
    base.python_path_prepend = shim;
  } else if (opts.elastic.enabled) {
    return fail(error_of(ErrorKind::kUsage, "--horovod-compat with elastic flags: a real Horovod is importable (" +
                                                *real + "), whose elastic mode needs horovodrun's driver; run an "
                                                "interpreter without it (horovod.torch.elastic is then hvdrun's)"));
  } else {
    std::fprintf(stderr, "hvdrun: --horovod-compat: a real Horovod is importable (%s); the workers use it, "
                 "not hvdrun's shim\n", real->c_str());
  }
  return {};
}

// Every remote host connected, authenticated and its agent started, all at once, before
// anything starts anywhere.
JobRun::Stop JobRun::connect_remote_hosts() {
  const std::vector<std::string>& remote_names = hosts.remote_names;
  heartbeat_timeout = tunable_double("HVDRUN_HEARTBEAT_TIMEOUT");
  if (remote_names.empty() && !opts.elastic.enabled) return {};  // (an elastic job's hosts may come later)
  StarterSettings ss;
  ss.ssh.port = opts.ssh_port;
  ss.ssh.identity_file = opts.ssh_identity_file;
  ss.ssh.host_key_policy = *policy;
  ss.ssh.ssh_dir = ssh_dir();
  ss.ssh_command = opts.ssh_command;
  ss.launch_command = opts.launch_command;
  ss.remote_hvdrun = opts.remote_hvdrun.empty() ? self_exe() : opts.remote_hvdrun;
  ss.start_timeout = opts.start_timeout;
  starter = make_starter(plan->launcher, ss);
  rs.remote_hvdrun = ss.remote_hvdrun;
  rs.start_timeout = opts.start_timeout;
  rs.heartbeat_timeout = heartbeat_timeout;
  if (remote_names.empty()) return {};
  for (const auto& h : remote_names) remotes.push_back(std::make_unique<RemoteHost>(h, rs, *starter));
  spdlog::debug("starting agents on {} host(s) ({})", remotes.size(), launcher_kind_name(plan->launcher));
  auto deadline = deadline_in(opts.start_timeout);
  if (auto s = starter->begin(remote_names, deadline); !s) return fail(s.error());
  auto errors = on_every_host(remotes, [deadline](size_t, RemoteHost& h) { return h.connect(deadline); });
  if (!errors.empty()) return fail_all(errors, remotes.size(), "failed to connect");
  return {};
}

// The pre-flight check (preflight.h) of a job with remote hosts, or of --check: every host's
// facts from its hello compared; an error stops the job (--check: prints the table). For a
// Python command, --check probes this machine's Python meanwhile (check_the_python).
JobRun::Stop JobRun::check_the_hosts() {
  preflight = opts.check || (!opts.no_preflight && !remotes.empty());
  if (!preflight) return {};
  preflight_asks = preflight_job(launcher_env, plan->env_overrides, opts.network_interface);
  std::vector<const RemoteHost*> by_index;
  for (auto& r : remotes) by_index.push_back(r.get());
  preflight_hosts = preflight_hosts_of(plan->ranks, hosts.remote_index, by_index);
  auto findings = check_preflight(preflight_hosts, preflight_asks);
  spdlog::debug("pre-flight check of {} host(s):\n{}", preflight_hosts.size(),
                preflight_table(preflight_hosts, preflight_asks, findings));
  if (opts.check && !preflight_passes(findings)) print_preflight_table(preflight_hosts, preflight_asks, findings);
  if (auto stop = say_preflight_findings(findings, preflight_hosts.size())) return stop;
  if (opts.check && hosts.any_local && runs_python(opts.command)) {
    auto env = env_to_strings(build_worker_env(launcher_env, plan->env_overrides, base, plan->ranks[0], 0));
    local_python = std::async(std::launch::async, probe_python_facts, opts.command[0], env, std::min(kPythonProbeTimeout, opts.start_timeout));
  }
  return {};
}

// Which addresses each host's ranks use (addressing.h), and rank 0's MASTER_PORT.
JobRun::Stop JobRun::plan_the_addresses() {
  ai.iface = opts.network_interface;
  ai.iface_addr = iface_addr;
  if (auto all = interface_addresses()) ai.local_ifaces = *all;
  ai.local_stack = network_stack_id();
  for (auto& r : remotes) ai.remotes.push_back({r->host(), r->hello()});
  const std::string& rank0_host = plan->ranks[0].host;
  ai.rank0_host = rank0_host;
  auto planned = plan_addressing(ai);
  if (!planned) return fail(planned.error());
  addressing = std::move(*planned);
  base.master_addr = addressing->master_addr;
  base.master_port = addressing->master_port;
  if (base.master_port == 0) {
    auto port = free_tcp_port();
    if (!port)
      return fail(error_of(ErrorKind::kLaunchFailed, "cannot find a free port for MASTER_PORT: " + port.error().message));
    base.master_port = *port;
  }
  return {};
}

// The job's output (tagged lines, --output-filename files) and the agent that runs this
// machine's ranks and ends the job.
JobRun::Stop JobRun::open_the_output() {
  std::vector<int> rank_ids;
  for (const auto& r : plan->ranks) rank_ids.push_back(r.rank);
  TaggedOutputOptions oo;
  oo.size = static_cast<int>(plan->ranks.size());
  oo.output_dir = opts.output_dir;
  oo.timestamps = opts.timestamps;
  auto created = TaggedOutput::create(oo, rank_ids);
  if (!created) return fail(created.error());
  sink = std::move(*created);
  job_logger.emplace(**sink);  // hvdrun's log lines queue behind the workers' output
  AgentOptions ao;
  ao.kill_grace = opts.kill_grace;
  job_sink.emplace(**sink);
  LocalAgent& agent = agent_.emplace(ao, *job_sink, &*watchdog);
  for (const auto& r : plan->ranks) rank_hosts.push_back(r.host);
  agent.set_rank_hosts(&rank_hosts);
  // hvdrun's output has no reader any more (`hvdrun ... | head -1`): the job ends as mpirun's
  // does, without a word (the reader is gone) and with SIGPIPE's status, 141.
  (*sink)->on_reader_gone([&agent] { agent.request_teardown("", 128 + SIGPIPE); });
  // An --output-filename file cannot be written (a full disk): the job ends, exit 7.
  (*sink)->on_file_failure(
      [&agent](std::string message) { agent.request_teardown(std::move(message), exit_code::kOutputFailed); });
  if (!opts.elastic.enabled) return {};
  auto made = ElasticJob::create(
      opts, *plan, *job_sink, [this](const RankInfo& r, int n, const ElasticSlot& s) { return elastic_launch(r, n, s); },
      [this](const std::string& host, const std::atomic<bool>& abort) { return open_new_host(host, abort); },
      heartbeat_timeout,
      watchdog ? &*watchdog : nullptr);
  if (!made) return fail(made.error());
  elastic = std::move(*made);
  ElasticDriver& e = elastic->driver();  // the reader gone, a file failing: as above, for the driver
  (*sink)->on_reader_gone([&e] { e.request_end("", 128 + SIGPIPE); });
  (*sink)->on_file_failure([&e](std::string message) { e.request_end(std::move(message), exit_code::kOutputFailed); });
  return {};
}

// What the rendezvous server reports goes to the agent (or, a stall's warning, to stderr).
rdv::ServerCallbacks JobRun::server_callbacks() {
  if (elastic) return elastic->callbacks();
  LocalAgent& agent = *agent_;
  rdv::ServerCallbacks cb;
  const JobPlan& p = *plan;
  // Both run on the rendezvous thread, a rank's silence report before its fatal one.
  auto silent_peer = std::make_shared<std::map<int, int>>();
  cb.on_silent = [silent_peer](int rank, int peer) { (*silent_peer)[rank] = peer; };
  cb.on_fatal = [&agent, &p, silent_peer](int rank, const std::string& message) {
    std::string who = rank >= 0 ? "rank " + std::to_string(rank) + " (host " + p.ranks[rank].host + ")" : "a worker";
    if (auto it = silent_peer->find(rank); it != silent_peer->end()) {
      agent.report_silence(rank, it->second, who + ": " + message);
      return;
    }
    agent.request_teardown("hvdrun: " + who + ": " + message, 1);
  };
  cb.on_stall = [](int, const std::string& key, const std::string& report) {
    if (key != rdv::kStallWarningKey) return;  // the shutdown one comes as a fatal report
    // The report says the workers' stall time (-x may set it for them alone).
    std::string msg = "hvdrun: warning: " + report;
    std::fwrite(msg.data(), 1, msg.size(), stderr);
    std::fflush(stderr);
  };
  cb.on_rank_left = [&agent](int rank) { agent.rank_left(rank); };
  cb.on_lost = [&agent](int rank, int peer) { agent.rank_lost_peer(rank, peer); };
  cb.on_start_timeout = [&agent](const std::string& message) {
    agent.request_teardown(message, exit_code::kStartTimeout);
  };
  return cb;
}

// The rendezvous server (and --horovod's Gloo store), on the address the hosts reach.
JobRun::Stop JobRun::start_the_rendezvous() {
  rdv::ServerOptions so;
  so.bind_address = addressing->bind_addr;
  so.port = opts.rendezvous_port;
  so.secret = secret;
  so.start_timeout = opts.start_timeout;
  for (const auto& r : plan->ranks) so.ranks.push_back({r.host, r.local_rank});
  if (opts.horovod) {  // Horovod's Gloo store, for the job's hosts only
    so.horovod.enabled = true;
    so.horovod.allowed_peers = job_peer_addresses(ai);
    so.horovod.limits.max_keys = static_cast<size_t>(tunable_int("HVDRUN_HOROVOD_STORE_KEYS"));
    so.horovod.limits.max_total_bytes = static_cast<size_t>(tunable_int("HVDRUN_HOROVOD_STORE_BYTES"));
  }
  auto started = rdv::Server::start(so, server_callbacks());
  if (!started) return fail(started.error());
  server = std::move(*started);
  if (elastic) elastic->attach(**server);
  base.rendezvous_port = (*server)->port();
  base.horovod_port = (*server)->horovod_port();
  if (opts.horovod)
    spdlog::debug("Horovod's Gloo store on {}:{} (allowed: loopback and {} addresses of the job's hosts)",
                  addressing->bind_addr, base.horovod_port, so.horovod.allowed_peers.size());
  spdlog::debug("rendezvous listening on {}:{}", addressing->bind_addr, base.rendezvous_port);
  return {};
}

// Every rank's launch: this machine's as WorkerLaunch, each remote host's as its AgentJob.
void JobRun::make_launches() {
  const auto& remote_index = hosts.remote_index;
  jobs.resize(remotes.size());
  for (size_t i = 0; i < remotes.size(); ++i) {
    jobs[i] = agent_job_for(hosts.remote_names[i]);
    jobs[i].python_facts = preflight && opts.check && runs_python(opts.command);
    jobs[i].python_facts_after_start = preflight && !opts.check && runs_python(opts.command) && !opts.elastic.enabled;
  }
  // hvdrun's stdin goes to rank 0 wherever it runs (as mpirun does): when rank 0 is remote,
  // through its agent. Not from a terminal hvdrun does not own (it would be stopped).
  if (auto it = remote_index.find(ai.rank0_host); it != remote_index.end() && stdin_is_ours_to_read()) {
    stdin_host = remotes[it->second].get();
    jobs[it->second].stdin_to_rank0 = true;
  }
  for (const auto& r : plan->ranks) {
    JobEnv host_env = env_of_host(base, *addressing, r.host);
    auto env = env_to_strings(build_worker_env(launcher_env, plan->env_overrides, host_env, r, r.host_index));
    if (auto it = remote_index.find(r.host); it != remote_index.end()) {
      jobs[it->second].ranks.push_back({r.rank, opts.command, std::move(env)});
      continue;
    }
    WorkerLaunch l;
    l.rank = r.rank;
    l.host = r.host;
    l.request.exe = exe;
    l.request.argv = opts.command;
    l.request.env = std::move(env);
    if (launches.size() < placement.size()) l.request.cpus = placement[launches.size()].cpus;
    launches.push_back(std::move(l));
  }
}

// A remote host's job, its ranks to come: in the launcher's working directory.
AgentJob JobRun::agent_job_for(const std::string& host) const {
  char cwd[4096];
  AgentJob job;
  job.host = host;
  job.cwd = getcwd(cwd, sizeof cwd) ? cwd : "/";
  job.kill_grace = opts.kill_grace;
  job.heartbeat_timeout = heartbeat_timeout;
  job.bind_to = opts.bind_to;
  job.elastic = opts.elastic.enabled;
  return job;
}

// Every remote host sent its job (the agents check their working directory, program and
// budget), all at once: one that cannot run it stops the job before anything starts.
JobRun::Stop JobRun::prepare_remote_hosts() {
  if (remotes.empty()) return {};
  auto errors = on_every_host(remotes, [this](size_t i, RemoteHost& h) { return h.prepare(jobs[i]); });
  if (!errors.empty()) {
    size_t n = remotes.size();
    remotes.clear();  // agents that saw no start exit at the EOF
    server->reset();
    return fail_all(errors, n, "cannot run the job");
  }
  return {};
}

// The pre-flight check's Python facts: a job's come once its workers run (LatePythonCheck).
// --check has them (kReady) and ends here: the table, and 0 when the hosts can run the job together.
JobRun::Stop JobRun::check_the_python() {
  if (!preflight || (!opts.check && !runs_python(opts.command))) return {};
  if (!opts.check) {
    late_python.emplace(preflight_hosts, preflight_asks).listen_to(remotes);
    return {};
  }
  for (auto& h : preflight_hosts) {
    if (auto it = hosts.remote_index.find(h.host); it != hosts.remote_index.end()) {
      h.has_python = remotes[it->second]->ready().has_python;
      h.python = remotes[it->second]->ready().python;
    } else if (local_python.valid()) {
      h.has_python = true;
      h.python = local_python.get();
    }
  }
  auto findings = check_preflight(preflight_hosts, preflight_asks);
  print_preflight_table(preflight_hosts, preflight_asks, findings);
  remotes.clear();  // agents that saw no start exit at the EOF
  server->reset();
  return say_preflight_findings(findings, preflight_hosts.size()).value_or(0);
}

// The job itself: every host started, hvdrun's stdin relayed to a remote rank 0, until
// the agent is done; the hosts and the server then go. The job's exit code.
int JobRun::run_the_workers() {
  LocalAgent& agent = *agent_;
  spdlog::debug("launching {} ranks on {} host(s), MASTER_ADDR={} MASTER_PORT={}", plan->ranks.size(),
                plan->hosts.size(), base.master_addr, base.master_port);
  std::vector<RemoteControl*> controls;
  for (auto& r : remotes) controls.push_back(r.get());
  agent.set_remotes(controls);
  (*server)->begin_start_timer();
  if (elastic) {
    workers_result = AgentResult{elastic->run(*plan, std::move(remotes)), "", false};
    server->reset();
    return workers_result->exit_code;
  }
  for (auto& r : remotes) r->start(agent, *job_sink);
  if (stdin_host) agent.relay_stdin_to(stdin_host);
  if (late_python && !launches.empty())  // this machine's Python, while its ranks start
    local_probe.emplace(opts.command[0], launches[0].request.env, kPythonProbeTimeout,
                        [this, host = launches[0].host](const PythonFacts& p) { late_python->arrived(host, p); });
  AgentResult res = agent.run(std::move(launches));
  workers_result = res;
  if (local_probe) local_probe->stop();
  for (auto& r : remotes) r->join();
  if (late_python) late_python->finish();
  remotes.clear();
  server->reset();
  return res.exit_code;
}

// The launch of an elastic job's worker: the usual environment of its round's rank, and
// its round and slot (elastic_round.h).
SpawnRequest JobRun::elastic_launch(const RankInfo& r, int round, const ElasticSlot& slot) {
  SpawnRequest q;
  q.exe = exe;
  q.argv = opts.command;
  std::unique_lock<std::mutex> lk(new_host_mu);
  JobEnv host_env = env_of_host(base, *addressing, r.host);
  lk.unlock();
  q.env = env_to_strings(build_worker_env(launcher_env, plan->env_overrides, host_env, r, r.host_index));
  for (auto& v : elastic_worker_env(round, slot)) q.env.push_back(std::move(v));
  q.register_fd = watchdog ? watchdog->fd() : -1;
  return q;
}

// A host that discovery names while the elastic job runs (on its opening thread, while
// the driver's goes on): its agent started and checked (admit_new_host); its job's one
// rank, for the program's check, has the first rank's environment.
Result<std::unique_ptr<RemoteHost>> JobRun::open_new_host(const std::string& host, const std::atomic<bool>& abort) {
  AgentJob job = agent_job_for(host);
  auto env = env_to_strings(build_worker_env(launcher_env, plan->env_overrides, base, plan->ranks[0], 0));
  job.ranks = {{0, opts.command, std::move(env)}};
  return open_elastic_host(host, *starter, rs, [this](const RemoteHost& r) { return admit_new_host(r); }, job, abort);
}

// The pre-flight check of a new host's hello against the job's hosts (its errors refuse
// it), then its addresses planned as the first hosts' were (under new_host_mu: opening
// threads, and the driver's elastic_launch, which reads the addresses).
Status JobRun::admit_new_host(const RemoteHost& r) {
  std::lock_guard<std::mutex> lk(new_host_mu);
  if (ai.remotes.empty() && opts.network_interface.empty())  // (plan_addressing chose loopback for all)
    return make_error(ErrorKind::kUsage, "host " + r.host() + ": the job started on this machine's hosts alone, whose "
                                         "ranks use loopback addresses; give --network-interface to add other hosts");
  if (!opts.no_preflight) {
    if (preflight_hosts.empty()) preflight_asks = preflight_job(launcher_env, plan->env_overrides, opts.network_interface);
    if (auto st = check_joining_host(preflight_hosts, preflight_asks, r); !st) return st;
  }
  // A host started again (its agent was lost): its new agent's view replaces the old one.
  ai.remotes.erase(std::remove_if(ai.remotes.begin(), ai.remotes.end(), [&](const auto& v) { return v.host == r.host(); }),
                   ai.remotes.end());
  ai.remotes.push_back({r.host(), r.hello()});
  auto planned = plan_addressing(ai);
  if (!planned) return planned.error();
  addressing->remote[r.host()] = planned->remote.at(r.host());
  return {};
}

// The timeline: merged whatever the job's end (a killed rank's file is cut short, not lost).
// Its failure is the job's status when the job itself succeeded.
int JobRun::merge_the_timeline(int code) {
  if (!timeline.empty())
    if (auto st = merge_timeline_files(timeline, static_cast<int>(plan->ranks.size())); !st) {
      std::fprintf(stderr, "hvdrun: %s\n", st.error().message.c_str());
      if (code == 0) return exit_code_for(st.error());
    }
  return code;
}

}  // namespace

// The job; with --max-restarts, again after its workers failed (a new JobRun: every worker
// starts anew, told which restart it is as torchrun tells its workers).
int run_job(const LaunchOptions& given, char** envp) {
  auto discovered = with_discovered_hosts(given);
  if (!discovered) return fail(discovered.error());
  const LaunchOptions& opts = *discovered;
  LaunchOptions o = opts;
  for (int restarts = 0;; ++restarts) {
    if (opts.elastic.max_restarts > 0) {
      o.env = opts.env;
      for (const char* var : {"HVDRUN_RESTART_COUNT=", "TORCHELASTIC_RESTART_COUNT="})
        o.env.push_back(var + std::to_string(restarts));
      o.env.push_back("TORCHELASTIC_MAX_RESTARTS=" + std::to_string(opts.elastic.max_restarts));
    }
    JobRun job(o, envp);
    int code = job.run();
    const auto& r = job.workers_result;
    std::string line = restart_line(r.has_value(), r && r->interrupted, code, restarts, opts.elastic.max_restarts);
    if (line.empty()) return code;
    std::fprintf(stderr, "hvdrun: %s\n", line.c_str());
  }
}

}  // namespace hvdrun
