#include "launcher/discovery_runner.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/deadline.h"
#include "common/unique_fd.h"
#include "launcher/exit_status.h"

extern char** environ;

namespace hvdrun {
namespace {

Result<pid_t> spawn_script(const std::string& script, int out_fd) {
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t attr;
  posix_spawn_file_actions_init(&fa);
  posix_spawnattr_init(&attr);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, out_fd, 1);
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP);
  const char* argv[] = {"/bin/sh", "-c", script.c_str(), nullptr};
  pid_t pid = -1;
  int rc = posix_spawn(&pid, "/bin/sh", &fa, &attr, const_cast<char* const*>(argv), environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  if (rc != 0)
    return error_of(ErrorKind::kLaunchFailed, "--host-discovery-script: /bin/sh: " + std::string(std::strerror(rc)));
  return pid;
}

// Reads `fd` to its end or the deadline; false at the deadline.
bool read_until(int fd, SteadyClock::time_point deadline, std::string& out) {
  char buf[4096];
  for (;;) {
    double left = seconds_until(deadline);
    if (left <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    int n = poll(&p, 1, static_cast<int>(left * 1000) + 1);
    if (n <= 0) continue;  // EINTR, or the time is up (checked above)
    ssize_t got = read(fd, buf, sizeof buf);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return true;
    if (out.size() < kMaxDiscoveryOutput) out.append(buf, std::min<size_t>(got, kMaxDiscoveryOutput - out.size()));
  }
}

// Waits for the script, ends whatever it left in its group (while its zombie still holds
// the group's id), then reaps it: its status, 128 + N for signal N.
int end_and_reap(pid_t pid) {
  siginfo_t info{};
  while (waitid(P_PID, pid, &info, WEXITED | WNOWAIT) < 0 && errno == EINTR) {
  }
  kill(-pid, SIGKILL);
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  return WIFSIGNALED(st) ? 128 + WTERMSIG(st) : WEXITSTATUS(st);
}

}  // namespace

Result<DiscoveryOutput> run_discovery_script(const std::string& script, double timeout) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0)
    return error_of(ErrorKind::kLaunchFailed, std::string("--host-discovery-script: pipe: ") + std::strerror(errno));
  UniqueFd rd(fds[0]), wr(fds[1]);
  auto pid = spawn_script(script, wr.get());
  if (!pid) return pid.error();
  wr.reset();
  DiscoveryOutput o;
  if (!read_until(rd.get(), deadline_in(timeout), o.out)) {
    kill(-*pid, SIGKILL);
    o.run.timed_out = true;
  }
  o.run.exit_code = end_and_reap(*pid);
  return o;
}

DiscoveredHosts judge_discovery_output(const DiscoveryOutput& o, int bare_slots, const std::string& script,
                                       double timeout, bool first) {
  DiscoveryRun run = o.run;
  auto hosts = parse_discovery_output(o.out, bare_slots, script);
  if (!hosts && !run.timed_out && run.exit_code == 0) run.parse_error = hosts.error().message;
  DiscoveredHosts d;
  d.verdict = judge_discovery(run, first, script, timeout);
  if (d.verdict.use && hosts) d.hosts = std::move(*hosts);
  return d;
}

Result<std::vector<HostSlots>> discover_hosts_once(const std::string& script, int bare_slots, double timeout) {
  auto o = run_discovery_script(script, timeout);
  if (!o) return o.error();
  DiscoveredHosts d = judge_discovery_output(*o, bare_slots, script, timeout, true);
  if (d.verdict.fatal) return error_of(ErrorKind::kLaunchFailed, d.verdict.message);
  return d.hosts;
}

}  // namespace hvdrun
