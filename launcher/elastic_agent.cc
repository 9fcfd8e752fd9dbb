#include "launcher/elastic_agent.h"

#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <map>
#include <memory>
#include <optional>
#include <set>

#include "common/socket_io.h"
#include "launcher/agent.h"
#include "launcher/line_splitter.h"
#include "launcher/process_runner.h"

namespace hvdrun {
namespace {

using agentwire::Type;

struct Worker {
  pid_t pid = -1;
  UniqueFd pipes[2];
  LineSplitter split[2];
  std::optional<int> status;  // once reaped
  double ended_at = 0;
};

class ElasticAgent {
 public:
  ElasticAgent(const AgentJob& job, PreparedHost& host, int in_fd, int out_fd, agentwire::FrameReader& reader)
      : job_(job), host_(host), in_fd_(in_fd), out_fd_(out_fd), reader_(reader) {}
  int run();

 private:
  bool write_frame(const std::string& frame) {
    if (!broken_ && !write_all(out_fd_, frame)) broken_ = true;
    return !broken_;
  }
  bool send(Type t, std::string_view payload) { return write_frame(agentwire::encode(t, payload)); }
  // Output lines of worker `id` (-1: the agent's own line) on stream `s` (0 out, 1 err).
  bool send_output(int id, int s, std::string_view lines) { return write_frame(agentwire::encode_output(id, s, lines)); }
  bool read_link();
  void take(const agentwire::Frame& f);
  void spawn(const AgentSpawn& s);
  void read_output(int id, Worker& w, int s);
  void reap();
  void report_ended();
  void end_all();
  void check_stopped();
  void poll_once(int sigfd);
  bool running() const {
    return std::any_of(workers_.begin(), workers_.end(), [](const auto& w) { return !w.second->status; });
  }

  const AgentJob& job_;
  PreparedHost& host_;
  int in_fd_, out_fd_;
  agentwire::FrameReader& reader_;
  ProcessRunner& runner_ = system_process_runner();
  std::map<int, std::unique_ptr<Worker>> workers_;  // by hvdrun's id
  std::map<pid_t, double> stopped_since_;           // workers' groups seen stopped, since when
  double heard_ = 0, beat_ = 0, next_stop_check_ = 0;
  bool broken_ = false, gone_ = false, signalled_ = false;
};

void ElasticAgent::spawn(const AgentSpawn& s) {
  SpawnRequest req;
  req.exe = host_.exe;
  req.argv = s.argv;
  req.env = s.env;
  req.register_fd = host_.watchdog.fd();
  auto w = std::make_unique<Worker>();
  auto spawned = runner_.spawn(req);
  if (!spawned) {  // (the program was found at the start: a fork failing, the budget)
    w->status = 127 << 8;
    send_output(-1, 1, "hvdrun --agent: " + spawned.error().message + "\n");
  } else {
    w->pid = spawned->pid;
    w->pipes[0] = std::move(spawned->out);
    w->pipes[1] = std::move(spawned->err);
  }
  workers_[s.id] = std::move(w);
}

// One frame from hvdrun: a worker to start, a signal for one, or a heartbeat.
void ElasticAgent::take(const agentwire::Frame& f) {
  if (f.type == Type::kSpawn) {
    if (auto s = decode_spawn(f.payload); s && !workers_.count(s->id)) spawn(*s);
  } else if (f.type == Type::kKill) {
    auto k = decode_kill(f.payload);
    if (!k) return;
    auto it = workers_.find(k->id);
    if (it != workers_.end() && !it->second->status && it->second->pid > 0) runner_.signal_group(it->second->pid, k->signal);
  }
}

// What hvdrun sent; false when its stream has ended (or broke).
bool ElasticAgent::read_link() {
  char buf[kReadChunk];
  ssize_t r = read(in_fd_, buf, sizeof buf);
  if (r < 0 && (errno == EINTR || errno == EAGAIN)) return true;
  if (r <= 0 || !reader_.feed(std::string_view(buf, static_cast<size_t>(r)))) return false;
  heard_ = runner_.now();
  while (auto f = reader_.next()) take(*f);
  return true;
}

void ElasticAgent::read_output(int id, Worker& w, int s) {
  char buf[kReadChunk];
  ssize_t r = read(w.pipes[s].get(), buf, sizeof buf);
  if (r < 0 && (errno == EINTR || errno == EAGAIN)) return;
  std::string lines = r > 0 ? std::string(w.split[s].feed(std::string_view(buf, static_cast<size_t>(r))))
                            : w.split[s].flush();
  if (r <= 0) w.pipes[s].reset();
  if (!lines.empty()) send_output(id, s, lines);
}

void ElasticAgent::reap() {
  for (auto [pid, st] : runner_.reap())
    for (auto& [id, w] : workers_)
      if (w->pid == pid && !w->status) {
        w->status = st;
        w->ended_at = runner_.now();
        if (!runner_.group_alive(pid)) host_.watchdog.forget(pid);
      }
}

// Each ended worker whose output is all read (its pipes closed) is reported, once.
void ElasticAgent::report_ended() {
  for (auto it = workers_.begin(); it != workers_.end();) {
    Worker& w = *it->second;
    if (w.status && runner_.now() - w.ended_at > kDrainAfterExit)
      for (int s = 0; s < 2; ++s) w.pipes[s].reset();
    if (!w.status || w.pipes[0].valid() || w.pipes[1].valid()) {
      ++it;
      continue;
    }
    send(Type::kEnded, encode_ended({it->first, *w.status}));
    it = workers_.erase(it);
  }
}

// A worker stopped (SIGSTOP) past the heartbeat time-out holds its peers' collectives as a
// silent host would: it is killed, and its end (SIGKILL) fails its host. Checked twice a
// second (a scan of /proc).
void ElasticAgent::check_stopped() {
  double now = runner_.now();
  if (now < next_stop_check_) return;
  next_stop_check_ = now + 0.5;
  std::set<pid_t> stopped = runner_.stopped_groups();
  for (auto it = stopped_since_.begin(); it != stopped_since_.end();)
    it = stopped.count(it->first) ? std::next(it) : stopped_since_.erase(it);
  for (auto& [id, w] : workers_) {
    if (w->status || w->pid <= 0 || !stopped.count(w->pid)) continue;
    double since = stopped_since_.emplace(w->pid, now).first->second;
    if (now - since < job_.heartbeat_timeout) continue;
    std::string line = "hvdrun --agent: a worker stopped for " + std::to_string(static_cast<int>(now - since)) +
                       " s (HVDRUN_HEARTBEAT_TIMEOUT): killed\n";
    send_output(-1, 1, line);
    runner_.signal_group(w->pid, SIGKILL);
    stopped_since_.erase(w->pid);
  }
}

// hvdrun is gone: every worker here ends (SIGTERM, SIGKILL after the grace), each reaped.
void ElasticAgent::end_all() {
  for (auto& [id, w] : workers_)
    if (!w->status && w->pid > 0) {
      runner_.signal_group(w->pid, SIGCONT);  // a stopped one would hold SIGTERM
      runner_.signal_group(w->pid, SIGTERM);
    }
  double kill_at = runner_.now() + job_.kill_grace;
  bool killed = false;
  while (running() && runner_.now() < kill_at + 2) {
    if (!killed && runner_.now() >= kill_at) {
      for (auto& [id, w] : workers_)
        if (!w->status && w->pid > 0) runner_.signal_group(w->pid, SIGKILL);
      killed = true;
    }
    reap();
    pollfd none{-1, 0, 0};
    runner_.wait(&none, 0, 20);  // (polling the reaper for at most the grace)
  }
}

// One wait on hvdrun's stream, the signals and the workers' pipes, until the next heartbeat
// or silence check; what came is taken.
void ElasticAgent::poll_once(int sigfd) {
  double now = runner_.now();
  std::vector<pollfd> pfds{{in_fd_, POLLIN, 0}, {sigfd, POLLIN, 0}};
  std::vector<std::pair<int, int>> pipe_of;  // (id, stream) of pfds[2 + i]
  for (auto& [id, w] : workers_)
    for (int s = 0; s < 2; ++s)
      if (w->pipes[s].valid()) {
        pfds.push_back({w->pipes[s].get(), POLLIN, 0});
        pipe_of.emplace_back(id, s);
      }
  double until = std::min({beat_, heard_ + job_.heartbeat_timeout + 0.01, now + 0.5});
  int n = runner_.wait(pfds.data(), pfds.size(), std::max(0, static_cast<int>((until - now) * 1000) + 1));
  if (n <= 0) return;
  if (pfds[0].revents & (POLLIN | POLLHUP | POLLERR)) gone_ = !read_link();
  if (pfds[1].revents & POLLIN)
    for (auto [sig, sender] : runner_.read_signals(sigfd))
      signalled_ = signalled_ || sig == SIGTERM || sig == SIGINT || sig == SIGHUP;
  for (size_t i = 0; i < pipe_of.size(); ++i)
    if (pfds[2 + i].revents & (POLLIN | POLLHUP | POLLERR))
      read_output(pipe_of[i].first, *workers_[pipe_of[i].first], pipe_of[i].second);
}

int ElasticAgent::run() {
  UniqueFd sigfd = runner_.open_signals();
  heard_ = beat_ = runner_.now();
  while (auto f = reader_.next()) take(*f);  // what came with kStart
  while (true) {
    double now = runner_.now();
    if (now >= beat_) {
      send(Type::kHeartbeat, "");
      beat_ = now + agentwire::kHeartbeatInterval;
    }
    if (gone_ || broken_ || signalled_ || now - heard_ > job_.heartbeat_timeout) break;
    poll_once(sigfd.get());
    reap();
    report_ended();
    check_stopped();
  }
  bool had_workers = running();
  end_all();
  host_.watchdog.disarm();
  return had_workers || signalled_ ? 1 : 0;
}

}  // namespace

int run_elastic_agent(const AgentJob& job, PreparedHost& host, int in_fd, int out_fd, agentwire::FrameReader& reader) {
  return ElasticAgent(job, host, in_fd, out_fd, reader).run();
}

}  // namespace hvdrun
