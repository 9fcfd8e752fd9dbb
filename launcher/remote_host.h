// One remote host of a job, from hvdrun's side: the link to its agent, driven by one
// thread. connect() and prepare() run before anything starts anywhere; start() relays the
// host's output to the sink and its failures to the LocalAgent until the agent is done.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/result.h"
#include "launcher/agent.h"
#include "launcher/host_link.h"
#include "launcher/output_sink.h"
#include "launcher/agent_messages.h"
#include "launcher/agent_wire.h"
#include "launcher/link_liveness.h"
#include "launcher/starter.h"
#include "launcher/stdin_relay.h"

namespace hvdrun {

struct RemoteSettings {
  std::string remote_hvdrun;  // the agent's executable on the remote host (for messages)
  double start_timeout = 30;
  double heartbeat_timeout = 30;  // HVDRUN_HEARTBEAT_TIMEOUT
};

// As a StdinSink: hvdrun's stdin for rank 0 on this host (the agent's loop relays it).
class RemoteHost : public RemoteControl, public StdinSink {
 public:
  // `starter` outlives this host.
  RemoteHost(std::string host, RemoteSettings settings, AgentStarter& starter);
  ~RemoteHost() override;

  // Starts the agent (through the starter); waits for its hello, all by `deadline`
  // (the start time-out). One-line errors that name the host.
  Status connect(std::chrono::steady_clock::time_point deadline);
  // connect() and prepare() give up (an error) within 200 ms of `*abort` set while they wait
  // for the agent (an elastic job that ends while this host's agent starts); `abort`
  // outlives them.
  void abort_when(const std::atomic<bool>* abort) { abort_ = abort; }
  // kInterrupted, naming the host, once `*abort` is set; else success.
  Status check_abort() const;
  const AgentHello& hello() const { return hello_; }
  // How far at least the host's clock is off ours: its clock in the hello against ours from
  // from before the agent was started (this object made) to when the hello came (0 when it
  // fell between them).
  double clock_offset() const { return clock_offset_; }
  // What its kReady said (the Python facts of a Python command), once prepare() succeeded.
  const AgentReady& ready() const { return ready_; }
  const std::string& host() const { return host_; }
  std::string local_address() const { return link_ ? link_->local_address() : ""; }

  // Sends the job; the agent checks the working directory and the program.
  Status prepare(const AgentJob& job);

  // The Python facts its agent sends once the workers run (AgentJob::python_facts_after_start),
  // to `fn` on the relay thread. Set before start().
  void on_python_facts(std::function<void(const std::string& host, const PythonFacts&)> fn) {
    on_python_facts_ = std::move(fn);
  }

  // Starts the workers and relays until the agent is done (on a thread of its own).
  void start(LocalAgent& agent, OutputSink& sink);
  // Or, in an elastic job, its relay (elastic_remote.h) reads and writes the link itself.
  HostLink& link() { return *link_; }
  agentwire::FrameReader& reader() { return reader_; }
  void join();
  // Drops the link: an agent that has not started anything exits, one that has ends its
  // workers.
  void close();

  // hvdrun's stdin for rank 0 on this host: queued while fewer than kStdinQueued bytes
  // wait to be sent (else nothing is taken, and the agent is woken once there is room);
  // dropped once the agent has ended.
  size_t take(std::string_view data) override;
  void end() override;
  bool closed() const override { return false; }  // after rank 0 closed it, dropped here
  int room_fd() const override { return -1; }

  void signal(int sig) override;
  bool finished() const override { return finished_.load(); }
  void wait_signals_sent(double seconds) override;

 private:
  Result<agentwire::Frame> next_frame(std::chrono::steady_clock::time_point deadline);
  Status write_by(std::string_view data, std::chrono::steady_clock::time_point deadline);
  std::string describe_exit(const std::string& what);
  Error stream_error(const Error& e) const;
  void relay(LocalAgent& agent, OutputSink& sink);
  using Clock = std::chrono::steady_clock;
  struct RelayState {
    LinkLiveness liveness;          // the agent's silence, and the Ctrl-Z exemption
    Clock::time_point last_sent;    // our last heartbeat
    bool failed_reported = false;  // the agent reported a failed rank (kFailed)
  };
  void send_queued_signals(RelayState& st);
  bool take_frame(const agentwire::Frame& f, LocalAgent& agent, OutputSink& sink, RelayState& st);
  bool read_link(LocalAgent& agent, OutputSink& sink, RelayState& st);
  void relay_stderr(OutputSink& sink);
  void wait_for_agent_exit(OutputSink& sink);
  static constexpr double kAgentExitWait = 5;  // seconds from the agent's kDone to its exit
  std::string lost_contact_message(int seconds) const;
  void send_queued_stdin();
  void wake_stdin_relay();

  std::string host_;
  RemoteSettings settings_;
  AgentStarter& starter_;
  std::unique_ptr<HostLink> link_;
  agentwire::FrameReader reader_;
  AgentHello hello_;
  double clock_offset_ = 0;
  double created_ = 0;  // our wall clock when this host was made, before its agent started
  AgentReady ready_;
  std::function<void(const std::string&, const PythonFacts&)> on_python_facts_;
  std::thread thread_;
  std::mutex mu_;
  std::vector<int> signals_;  // to send, under mu_
  bool signals_in_flight_ = false;  // under mu_: taken from signals_, being written
  std::condition_variable signals_cv_;  // signals_ sent, or finished_
  std::deque<std::string> stdin_;  // to send, under mu_
  size_t stdin_bytes_ = 0;
  static constexpr size_t kStdinQueued = 4u << 20;
  bool stdin_refused_ = false;     // under mu_: take() had no room; wake the agent when there is
  LocalAgent* agent_ = nullptr;   // set by start(), for that wake
  uint64_t stdin_in_flight_ = 0;  // relay thread: stdin sent that rank 0 has not taken yet
  bool stdin_closed_ = false;     // relay thread: rank 0's stdin is closed (the agent said)
  std::atomic<bool> finished_{false};
  const std::atomic<bool>* abort_ = nullptr;
  size_t stderr_shown_ = 0;  // how much of the agent's stderr has been relayed
};

}  // namespace hvdrun
