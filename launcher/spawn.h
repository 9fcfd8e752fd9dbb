// Starting one worker: its own process group, stdout/stderr into pipes, a clean signal
// state, and the environment we built. posix_spawn, as ninja does.
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
};

struct SpawnedWorker {
  pid_t pid = -1;  // also its process group id
  UniqueFd out, err;
};

Result<SpawnedWorker> spawn_worker(const SpawnRequest& req);

// A wait status as a shell reports it: the exit code, or 128 + the signal.
int exit_code_of(int wait_status);

// Signals hvdrun handles through its event loop; blocked in hvdrun, reset in workers.
const std::vector<int>& handled_signals();

}  // namespace hvdrun
