// Test helper: run a real process with files or pipes for its output and a hard deadline,
// so that a bug fails a test instead of hanging CI.
#pragma once

#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

namespace testing_hvdrun {

struct Outcome {
  bool timed_out = false;
  int exit_code = -1;  // 128+signal when killed by a signal
  std::string out, err;
};

class Process {
 public:
  // Starts argv with stdout/stderr to temp files; `input` (if not null) is fed on stdin.
  Process(const std::vector<std::string>& argv, const std::map<std::string, std::string>& extra_env = {},
          const std::string* input = nullptr);
  ~Process();  // kills the process group if still running
  pid_t pid() const { return pid_; }
  void signal(int sig);
  // Waits up to `seconds`; on time-out kills it (SIGKILL) and sets timed_out.
  Outcome wait(double seconds);

 private:
  pid_t pid_ = -1;
  bool reaped_ = false;
  std::string out_path_, err_path_, in_path_;
};

Outcome run(const std::vector<std::string>& argv, double seconds = 60,
            const std::map<std::string, std::string>& extra_env = {}, const std::string* input = nullptr);

std::string read_file(const std::string& path);
bool pid_alive(pid_t pid);  // exists and is not a zombie
// Waits until none of `pids` is alive, up to `seconds`; returns the survivors.
std::vector<pid_t> wait_gone(const std::vector<pid_t>& pids, double seconds);
// Waits until `path` exists and holds at least `lines` lines.
bool wait_for_lines(const std::string& path, int lines, double seconds);
std::string make_temp_dir();
std::vector<std::string> split_lines(const std::string& s);

}  // namespace testing_hvdrun
