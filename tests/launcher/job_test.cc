// A job from its options to its exit code (launcher/job): the steps that decide, alone;
// and run_job itself with local ranks, in a child process whose stdout and stderr are
// the test's.
#include "launcher/job.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <gtest/gtest.h>
#include <string>

#include "launcher/agent.h"

extern char** environ;

namespace hvdrun {
namespace {

JobPlan plan_of(const std::string& hosts, const std::string& launcher = "") {
  LaunchOptions o;
  o.hosts = hosts;
  o.launcher = launcher;
  o.command = {"true"};
  std::map<std::string, std::string> env;
  if (launcher == "slurm") env["SLURM_JOB_ID"] = "7";
  auto p = make_plan(o, env);
  EXPECT_TRUE(p.ok()) << p.error().message;
  return p.ok() ? *p : JobPlan{};
}

TEST(Job, HostsSplitIntoThisMachineAndRemoteOnesInRankOrder) {
  JobHosts h = split_hosts(plan_of("b:1,localhost:2,a:2,b:1"));
  EXPECT_TRUE(h.any_local);
  EXPECT_EQ(h.remote_names, (std::vector<std::string>{"b", "a"}));
  EXPECT_EQ(h.remote_index, (std::map<std::string, int>{{"b", 0}, {"a", 1}}));
  JobHosts only_here = split_hosts(plan_of("localhost:3"));
  EXPECT_TRUE(only_here.any_local);
  EXPECT_TRUE(only_here.remote_names.empty());
}

// With srun every node runs an agent, this machine's included.
TEST(Job, SlurmRunsEveryHostThroughAnAgent) {
  JobHosts h = split_hosts(plan_of("localhost:1,n2:1", "slurm"));
  EXPECT_FALSE(h.any_local);
  EXPECT_EQ(h.remote_names, (std::vector<std::string>{"localhost", "n2"}));
}

TEST(Job, TheBudgetCountsThisMachinesRanksAndEveryRemoteHost) {
  JobPlan p = plan_of("localhost:2,a:3,b:1");
  BudgetNeed need = budget_need(p, split_hosts(p));
  EXPECT_EQ(need.all_ranks, 6);
  EXPECT_EQ(need.local_ranks, 2);
  EXPECT_EQ(need.remote_hosts, 2);
}

TEST(Job, EachHostsRanksGetItsAddresses) {
  JobEnv base;
  base.master_addr = "10.0.0.1";
  base.iface = "eth9";
  Addressing a;
  a.local = {"127.0.0.1", "127.0.0.1", "", "lo"};
  a.remote["b"] = {"10.0.0.1", "10.0.0.2", "eth0", "eth0"};
  JobEnv b = env_of_host(base, a, "b");
  EXPECT_EQ(b.rendezvous_addr, "10.0.0.1");
  EXPECT_EQ(b.iface, "eth0");
  EXPECT_EQ(b.gloo_iface, "eth0");
  EXPECT_EQ(b.master_addr, "10.0.0.1");
  JobEnv here = env_of_host(base, a, "localhost");
  EXPECT_EQ(here.rendezvous_addr, "127.0.0.1");
  EXPECT_EQ(here.iface, "");
  EXPECT_EQ(here.gloo_iface, "lo");
}

struct Outcome {
  int code = -1;
  std::string out, err;
};

// run_job(opts) in a child (as hvdrun's main runs it), with RLIMIT_NOFILE at `nofile`
// when given; what it printed, within 60 s.
Outcome run_job_in_child(const LaunchOptions& opts, rlim_t nofile = 0) {
  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) return {};
  pid_t pid = fork();
  if (pid == 0) {
    dup2(out[1], 1);
    dup2(err[1], 2);
    block_handled_signals();
    if (nofile) {
      rlimit rl{nofile, nofile};
      setrlimit(RLIMIT_NOFILE, &rl);
    }
    int code = run_job(opts, environ);
    std::fflush(nullptr);
    _exit(code);
  }
  close(out[1]);
  close(err[1]);
  Outcome o;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  int fds[2] = {out[0], err[0]};
  std::string* into[2] = {&o.out, &o.err};
  while (fds[0] >= 0 || fds[1] >= 0) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    pollfd p[2] = {{fds[0], POLLIN, 0}, {fds[1], POLLIN, 0}};
    if (left.count() <= 0 || poll(p, 2, static_cast<int>(left.count())) == 0) {
      kill(pid, SIGKILL);
      o.err += "[the job did not end within 60 s]";
      break;
    }
    for (int i = 0; i < 2; ++i) {
      if (fds[i] < 0 || !p[i].revents) continue;
      char buf[4096];
      ssize_t n = read(fds[i], buf, sizeof buf);
      if (n > 0) {
        into[i]->append(buf, static_cast<size_t>(n));
      } else {
        close(fds[i]);
        fds[i] = -1;
      }
    }
  }
  for (int fd : fds)
    if (fd >= 0) close(fd);
  int st = 0;
  if (waitpid(pid, &st, 0) == pid && WIFEXITED(st)) o.code = WEXITSTATUS(st);
  return o;
}

LaunchOptions local_job(int np, std::vector<std::string> command) {
  LaunchOptions o;
  o.np = np;
  o.command = std::move(command);
  return o;
}

TEST(Job, DryRunPrintsThePlanAndStartsNothing) {
  std::string marker = std::filesystem::temp_directory_path() / ("hvdrun-job-test-" + std::to_string(getpid()));
  LaunchOptions o = local_job(2, {"touch", marker});
  o.dry_run = true;
  Outcome r = run_job_in_child(o);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_EQ(r.out.rfind("{\"rank\":0,\"size\":2,", 0), 0u) << r.out;
  EXPECT_NE(r.out.find("\n{\"rank\":1,\"size\":2,"), std::string::npos) << r.out;
  EXPECT_FALSE(std::filesystem::exists(marker));
}

TEST(Job, LocalRanksRunAndTheirOutputIsTagged) {
  Outcome r = run_job_in_child(local_job(2, {"sh", "-c", "echo rank $RANK of $WORLD_SIZE"}));
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("[0]<stdout>:rank 0 of 2\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("[1]<stdout>:rank 1 of 2\n"), std::string::npos) << r.out;
  Outcome failed = run_job_in_child(local_job(2, {"sh", "-c", "exit $((RANK + 3))"}));
  EXPECT_EQ(failed.code, 3) << failed.err;
}

// The order of host preparation (host_preparation.h) on hvdrun's machine: a missing
// program is the first error, over the descriptor budget or not; then the budget.
TEST(Job, AMissingProgramIsTheFirstErrorThenTheBudget) {
  Outcome missing = run_job_in_child(local_job(20, {"no-such-program-hvdrun"}), 100);
  EXPECT_EQ(missing.code, 127);
  EXPECT_EQ(missing.err, "hvdrun: no-such-program-hvdrun: command not found\n");
  Outcome over = run_job_in_child(local_job(20, {"true"}), 100);
  EXPECT_EQ(over.code, 3);
  EXPECT_EQ(over.err.rfind("hvdrun: 20 ranks need about ", 0), 0u) << over.err;
  EXPECT_NE(over.err.find("over its limit of 100 (RLIMIT_NOFILE"), std::string::npos) << over.err;
  EXPECT_EQ(over.out, "");
}

}  // namespace
}  // namespace hvdrun
