// The per-host agent: starts the slots of one host, streams their output line by line to
// an OutputSink, watches their exits, and tears the whole set down on the first failure,
// on a signal to hvdrun, or when asked (request_teardown, from another thread). Local
// hosts run it inside hvdrun; remote hosts run the same code in `hvdrun` agent mode.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/unique_fd.h"
#include "launcher/output_sink.h"
#include "launcher/spawn.h"
#include "launcher/watchdog.h"

namespace hvdrun {

struct WorkerLaunch {
  int rank = 0;
  std::string host;
  SpawnRequest request;  // stdin_fd is filled in by the agent
};

struct AgentOptions {
  double kill_grace = 5.0;   // seconds between SIGTERM and SIGKILL
  bool stdin_to_rank0 = true;
};

struct AgentResult {
  int exit_code = 0;
  std::string message;  // why the job ended early; "" on success
};

// Blocks the signals the agent handles (call first thing in main, before any thread).
void block_handled_signals();
std::string signal_name(int sig);  // "SIGKILL"

class LocalAgent {
 public:
  LocalAgent(AgentOptions opts, OutputSink& sink, Watchdog* watchdog);
  ~LocalAgent();
  LocalAgent(const LocalAgent&) = delete;
  LocalAgent& operator=(const LocalAgent&) = delete;

  // Runs the workers to completion. Every process group is gone when it returns.
  AgentResult run(std::vector<WorkerLaunch> launches);

  // Thread-safe: tear the job down, report `message` and exit with `exit_code`.
  void request_teardown(std::string message, int exit_code);

 private:
  struct Worker;
  void teardown(const std::string& message, int exit_code);
  void signal_all(int sig);
  void reap();
  void report_failure();
  bool any_group_alive() const;

  AgentOptions opts_;
  OutputSink& sink_;
  Watchdog* watchdog_;
  std::vector<Worker> workers_;
  UniqueFd control_rd_, control_wr_;
  std::mutex control_mu_;
  std::optional<std::pair<std::string, int>> control_request_;

  bool tearing_down_ = false;
  bool killed_ = false;
  std::optional<double> kill_deadline_;
  struct FailedWorker {
    int rank;
    std::string host;
    int status;
  };
  std::vector<FailedWorker> failures_;
  std::optional<double> report_at_;  // when the failures seen so far are reported
  AgentResult result_;
};

}  // namespace hvdrun
