// hvdrun's side of an elastic job's remote hosts (docs/ELASTIC.md): the driver's
// ProcessRunner and ElasticHosts in one. A worker whose request's host (its slot's) is
// this machine is this machine's process; one on another host is spawned by that host's
// agent (kSpawn), its "pid" an id above any real pid (kFirstRemoteId), its signals sent as
// kKill, its output written into pipes the driver reads as a local worker's, its end
// (kEnded) reaped with its wait status. One relay thread per host's agent: heartbeats both
// ways, and its link's drop said by liveness(). A new host's agent starts on a thread of its
// own (open()); close_all() aborts and joins the starts still under way.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/wake_pipe.h"
#include "launcher/elastic_hosts.h"
#include "launcher/process_runner.h"
#include "launcher/remote_host.h"

namespace hvdrun {

class ElasticAgents : public ProcessRunner, public ElasticHosts {
 public:
  // Starts a new host's agent: connected, checked, its job (AgentJob::elastic) prepared. On
  // an opening thread; it gives up (an error) soon after `abort` is set.
  using Opener =
      std::function<Result<std::unique_ptr<RemoteHost>>(const std::string& host, const std::atomic<bool>& abort)>;
  static constexpr pid_t kFirstRemoteId = 1 << 23;  // above pid_max's limit (2^22)

  // `wake`: what wakes the driver's wait when a remote worker ends or a link drops.
  ElasticAgents(Opener opener, OutputSink& sink, double heartbeat_timeout, WakePipe wake);
  ~ElasticAgents() override;
  // A host of the first round, connected and prepared: its workers start with kStart.
  void add(std::unique_ptr<RemoteHost> host);
  // Every agent's link closed (they end what still runs there); the starts under way
  // aborted and their threads joined (what they started ends with its link).
  void close_all();

  // ElasticHosts
  bool remote(const std::string& host) const override;
  bool open(const std::string& host) override;
  std::vector<Opened> opened() override;
  Liveness liveness(const std::string& host) override;
  void close(const std::string& host) override;
  double heartbeat_timeout() const override { return heartbeat_timeout_; }

  // ProcessRunner: this machine's, except for the remote workers' ids.
  double now() override { return local_.now(); }
  Result<SpawnedWorker> spawn(const SpawnRequest& req) override;
  std::vector<std::pair<pid_t, int>> reap() override;
  void signal_group(pid_t pgid, int sig) override;
  void signal_process(pid_t pid, int sig) override { signal_group(pid, sig); }
  bool group_alive(pid_t pgid) override;
  pid_t group_of(pid_t pid) override { return pid >= kFirstRemoteId ? pid : local_.group_of(pid); }
  std::set<pid_t> children() override { return local_.children(); }
  std::set<pid_t> stopped_groups() override { return local_.stopped_groups(); }
  bool sent_by_slurm(pid_t sender) override { return local_.sent_by_slurm(sender); }
  UniqueFd open_signals() override { return local_.open_signals(); }
  std::vector<std::pair<int, pid_t>> read_signals(int fd) override { return local_.read_signals(fd); }
  void stop_self() override { local_.stop_self(); }
  int wait(pollfd* fds, size_t n, int timeout_ms) override;
  // The remote workers not yet ended (an ended one, or one of a dropped host, is forgotten).
  size_t remote_workers() const;

 private:
  struct Session;
  struct Worker;
  struct Opening;
  void abort_openings();
  Session* session_of(const std::string& host);
  bool relay_once(Session& s);
  void take_frame(Session& s, const agentwire::Frame& f);
  void write_output(Worker& w, int stream, std::string_view lines);
  void ended(pid_t id, int status);
  void drop(Session& s, const std::string& why);

  ProcessRunner& local_;
  Opener opener_;
  OutputSink& sink_;
  double heartbeat_timeout_;
  WakePipe wake_;
  mutable std::mutex mu_;  // guards what follows and each Session's queue and state
  std::map<std::string, std::unique_ptr<Session>> sessions_;
  std::map<std::string, std::unique_ptr<Opening>> openings_;  // the agents being started, by host
  std::map<pid_t, std::unique_ptr<Worker>> workers_;  // the remote ones running, by id
  std::vector<std::pair<pid_t, int>> reaped_;
  pid_t next_id_ = kFirstRemoteId;
  mutable std::mutex remote_mu_;
  mutable std::map<std::string, bool> remote_;  // host -> not this machine
};

}  // namespace hvdrun
