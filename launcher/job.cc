#include "launcher/job.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "common/strings.h"
#include "common/unique_fd.h"
#include "rendezvous/auth.h"
#include "rendezvous/server.h"
#include "common/net.h"
#include "launcher/agent.h"
#include "launcher/local_host.h"
#include "launcher/log_sink.h"
#include "launcher/output_sink.h"
#include "launcher/spawn.h"
#include "launcher/watchdog.h"

namespace hvdrun {
namespace {

int fail(const Error& e) {
  std::fprintf(stderr, "hvdrun: %s\n", e.message.c_str());
  return e.code;
}

// A TCP port free on this machine right now, for MASTER_PORT.
Result<int> free_port() {
  UniqueFd s(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!s.valid()) return make_error("socket failed", exit_code::kLaunchFailed);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t len = sizeof a;
  if (bind(s.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      getsockname(s.get(), reinterpret_cast<sockaddr*>(&a), &len) != 0)
    return make_error("cannot find a free port for MASTER_PORT", exit_code::kLaunchFailed);
  return static_cast<int>(ntohs(a.sin_port));
}

}  // namespace

Result<JobPlan> make_plan(const LaunchOptions& opts, const std::map<std::string, std::string>& launcher_env) {
  JobPlan plan;
  if (!opts.hosts.empty()) {
    auto h = parse_host_list(opts.hosts);
    if (!h) return h.error();
    plan.hosts = std::move(*h);
  } else if (!opts.hostfile.empty()) {
    auto h = read_hostfile(opts.hostfile);
    if (!h) return h.error();
    plan.hosts = std::move(*h);
  } else {
    plan.hosts = {{"localhost", opts.np}};
  }
  auto ranks = assign_ranks(plan.hosts, opts.np);
  if (!ranks) return ranks.error();
  plan.ranks = std::move(*ranks);
  auto env = parse_env_overrides(opts.env, launcher_env);
  if (!env) return env.error();
  plan.env_overrides = std::move(*env);
  return plan;
}

std::string dry_run_text(const JobPlan& plan, const std::vector<std::string>& command) {
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
    j["argv"] = command;
    out += j.dump() + "\n";
  }
  return out;
}

int run_job(const LaunchOptions& opts, char** envp) {
  auto launcher_env = environ_to_map(envp);
  auto plan = make_plan(opts, launcher_env);
  if (!plan) return fail(plan.error());
  if (opts.dry_run) {
    std::string text = dry_run_text(*plan, opts.command);
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
    return 0;
  }
  for (const auto& h : plan->hosts) {
    bool used = false;
    for (const auto& r : plan->ranks) used = used || r.host == h.host;
    if (used && !is_local_host(h.host))
      return fail(make_error("host '" + h.host +
                                 "' is not this machine, and this build of hvdrun launches on local hosts only",
                             exit_code::kLaunchFailed));
  }

  JobEnv job;
  job.master_addr = "127.0.0.1";
  auto port = free_port();
  if (!port) return fail(port.error());
  job.master_port = *port;
  job.iface = opts.network_interface;
  job.nccl_debug = opts.nccl_debug;
  job.start_timeout = opts.start_timeout;
  // The rendezvous listens on loopback when every host is this machine, else on the
  // address of --network-interface.
  job.rendezvous_addr = "127.0.0.1";
  if (!opts.network_interface.empty()) {
    auto a = interface_address(opts.network_interface);
    if (!a) return fail(make_error("--network-interface: " + a.error().message, exit_code::kUsage));
    job.rendezvous_addr = *a;
  }
  std::string secret = rdv::new_secret();
  job.secret_hex = to_hex(secret.data(), secret.size());

  // Resolve the program once, with the workers' PATH, before anything starts.
  auto first_env = build_worker_env(launcher_env, plan->env_overrides, job, plan->ranks[0], 0);
  auto exe = resolve_program(opts.command[0], first_env.count("PATH") ? first_env.at("PATH") : "");
  if (!exe) return fail(exe.error());

  // The watchdog is forked before any thread of ours exists.
  auto watchdog = Watchdog::start(opts.kill_grace);
  if (!watchdog) return fail(watchdog.error());

  std::vector<int> rank_ids;
  for (const auto& r : plan->ranks) rank_ids.push_back(r.rank);
  TaggedOutputOptions oo;
  oo.size = static_cast<int>(plan->ranks.size());
  oo.output_dir = opts.output_dir;
  oo.timestamps = opts.timestamps;
  auto sink = TaggedOutput::create(oo, rank_ids);
  if (!sink) {
    watchdog->disarm();
    return fail(sink.error());
  }
  ScopedJobLogger job_logger(**sink);  // hvdrun's log lines queue behind the workers' output
  AgentOptions ao;
  ao.kill_grace = opts.kill_grace;
  LocalAgent agent(ao, **sink, &*watchdog);

  rdv::ServerOptions so;
  so.bind_address = job.rendezvous_addr;
  so.port = opts.rendezvous_port;
  so.secret = secret;
  so.start_timeout = opts.start_timeout;
  for (const auto& r : plan->ranks) so.ranks.push_back({r.host, r.local_rank});
  rdv::ServerCallbacks cb;
  const JobPlan& p = *plan;
  cb.on_fatal = [&agent, &p](int rank, const std::string& message) {
    std::string who = rank >= 0 ? "rank " + std::to_string(rank) + " (host " + p.ranks[rank].host + ")" : "a worker";
    agent.request_teardown("hvdrun: " + who + ": " + message, 1);
  };
  cb.on_start_timeout = [&agent](const std::string& message) {
    agent.request_teardown(message, exit_code::kStartTimeout);
  };
  auto server = rdv::Server::start(so, cb);
  if (!server) {
    watchdog->disarm();
    return fail(server.error());
  }
  job.rendezvous_port = (*server)->port();
  spdlog::debug("rendezvous listening on {}:{}", job.rendezvous_addr, job.rendezvous_port);

  std::vector<WorkerLaunch> launches;
  for (const auto& r : plan->ranks) {
    WorkerLaunch l;
    l.rank = r.rank;
    l.host = r.host;
    l.request.exe = *exe;
    l.request.argv = opts.command;
    l.request.env = env_to_strings(build_worker_env(launcher_env, plan->env_overrides, job, r, r.host_index));
    launches.push_back(std::move(l));
  }
  spdlog::debug("launching {} ranks on {} host(s), MASTER_ADDR={} MASTER_PORT={}", launches.size(),
                plan->hosts.size(), job.master_addr, job.master_port);
  (*server)->begin_start_timer();
  AgentResult res = agent.run(std::move(launches));
  server->reset();
  watchdog->disarm();
  return res.exit_code;
}

}  // namespace hvdrun
