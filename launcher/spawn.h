// Starting one worker: its own process group, stdout/stderr into pipes, a clean signal
// state, and the environment we built. fork and exec: the child tells the watchdog its
// process group itself, before exec (see SpawnRequest::register_fd).
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "common/result.h"
#include "common/unique_fd.h"

namespace hvdrun {

// Finds `program` the way execvp would, in `path` (a PATH value). Errors carry exit code
// 127 (not found) or 126 (found but not executable) and name the program.
Result<std::string> resolve_program(const std::string& program, const std::string& path);

struct SpawnRequest {
  std::string exe;                // resolved path
  std::vector<std::string> argv;  // argv[0] as the user wrote it
  std::vector<std::string> env;   // "K=V"
  int stdin_fd = -1;              // -1: /dev/null
  // The watchdog's pipe (-1: none). The child writes its pid (its process group) there
  // before exec, so that no moment exists where the worker runs and the watchdog does not
  // know it: hvdrun killed while a worker was being spawned (posix_spawn waits for the
  // child's exec, milliseconds for a large program) left that worker running. The child
  // holds the pipe until exec, so the watchdog cannot see hvdrun's end before it.
  int register_fd = -1;
  std::vector<int> cpus;  // the CPUs it is bound to before its exec (placement.h); empty: not bound
  int nice = 0;           // raised to this before its exec (a helper that must not slow the ranks)
  // The host it runs on, for a runner that spans hosts (ElasticAgents: another host's worker
  // is spawned by that host's agent); "": this machine.
  std::string host;
};

struct SpawnedWorker {
  pid_t pid = -1;  // also its process group id
  UniqueFd out, err;
};

Result<SpawnedWorker> spawn_worker(const SpawnRequest& req);

// A short helper program run to its end (a probe): its stdout and stderr, its wait status,
// or timed_out (then its group is killed) when it has not closed both within `timeout_s`.
struct Captured {
  std::string out, err;
  int status = 0;
  bool timed_out = false;
  bool cancelled = false;  // `cancel_fd` became readable while its output was open (then its group is killed too)
};
Result<Captured> run_captured(const SpawnRequest& req, double timeout_s);
// The same for a helper already spawned (spawn_worker), read here until its end, the
// time-out or `cancel_fd` (-1: none) becoming readable (then killed and left unreaped,
// unless its output, read to what is there, had already ended: then its answer is taken).
Captured collect_captured(SpawnedWorker& w, double timeout_s, int cancel_fd = -1);

// A wait status as a shell reports it: the exit code, or 128 + the signal.
int exit_code_of(int wait_status);

// Signals hvdrun handles through its event loop; blocked in hvdrun, reset in workers.
const std::vector<int>& handled_signals();

}  // namespace hvdrun
