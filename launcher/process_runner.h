// What the agent's loop asks of the operating system: the clock, starting a worker,
// reaping, signalling, the /proc scans, and the wait for something to happen. The loop's
// decisions (teardown, signals, blame) are made over this interface only, so that a fake
// (tests/launcher/fake_process_runner.h) runs them with no process and in virtual time,
// as ninja's FakeCommandRunner does for its builder.
#pragma once

#include <poll.h>
#include <sys/types.h>

#include <set>
#include <utility>
#include <vector>

#include "common/result.h"
#include "launcher/spawn.h"

namespace hvdrun {

class ProcessRunner {
 public:
  virtual ~ProcessRunner() = default;
  // Seconds on a monotonic clock. Thread-safe.
  virtual double now() = 0;
  // Starts a worker in its own process group (spawn_worker).
  virtual Result<SpawnedWorker> spawn(const SpawnRequest& req) = 0;
  // The children that have ended since the last call: (pid, wait status). Never blocks.
  virtual std::vector<std::pair<pid_t, int>> reap() = 0;
  virtual void signal_group(pid_t pgid, int sig) = 0;
  virtual void signal_process(pid_t pid, int sig) = 0;
  // Whether any process is left in the group.
  virtual bool group_alive(pid_t pgid) = 0;
  virtual pid_t group_of(pid_t pid) = 0;
  // This process's live children (with hvdrun a child subreaper: a rank's orphaned
  // descendants too, whatever group or session they moved to).
  virtual std::set<pid_t> children() = 0;
  // Process groups with a member stopped by a signal (SIGSTOP, Ctrl-Z).
  virtual std::set<pid_t> stopped_groups() = 0;
  // Whether `sender` is Slurm's step daemon.
  virtual bool sent_by_slurm(pid_t sender) = 0;
  // A descriptor that turns readable when one of handled_signals() came to this process
  // (a signalfd), and the signals read from it: (signal, the pid that sent it).
  virtual UniqueFd open_signals() = 0;
  virtual std::vector<std::pair<int, pid_t>> read_signals(int fd) = 0;
  // Stops this process (Ctrl-Z, once the workers are stopped).
  virtual void stop_self() = 0;
  // Waits at most `timeout_ms` for one of `fds` (poll(2)).
  virtual int wait(pollfd* fds, size_t n, int timeout_ms) = 0;
};

// The real one: fork/exec, waitpid, kill, /proc, poll.
ProcessRunner& system_process_runner();

}  // namespace hvdrun
