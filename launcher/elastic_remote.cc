#include "launcher/elastic_remote.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <optional>
#include <thread>

#include "launcher/local_host.h"

namespace hvdrun {

using agentwire::Type;

struct ElasticAgents::Session {
  std::unique_ptr<RemoteHost> remote;
  std::thread thread;
  std::string out;                     // bytes for the agent, under mu_ (frames whole, in order)
  std::optional<std::string> dropped;  // under mu_
  std::atomic<double> heard{0};
  std::atomic<bool> stop{false};
  double last_beat = 0;  // the relay thread's
};

// A new host's agent being started, on its thread; `result` set (under mu_) when it ends.
struct ElasticAgents::Opening {
  std::thread thread;
  std::atomic<bool> abort{false};
  std::optional<Result<std::unique_ptr<RemoteHost>>> result;
};

struct ElasticAgents::Worker {
  std::string host;
  UniqueFd pipes[2];        // the write ends of the pipes the driver reads (non-blocking)
  std::string pending[2];   // output waiting for room there
};

ElasticAgents::ElasticAgents(Opener opener, OutputSink& sink, double heartbeat_timeout, WakePipe wake)
    : local_(system_process_runner()), opener_(std::move(opener)), sink_(sink), heartbeat_timeout_(heartbeat_timeout),
      wake_(std::move(wake)) {}

ElasticAgents::~ElasticAgents() { close_all(); }

void ElasticAgents::close_all() {
  abort_openings();
  std::vector<std::string> hosts;
  {
    std::lock_guard<std::mutex> lk(mu_);
    for (const auto& [h, s] : sessions_) hosts.push_back(h);
  }
  for (const auto& h : hosts) close(h);
}

// (Asked at every turn of the driver's loop: is_local_host reads the interfaces.)
bool ElasticAgents::remote(const std::string& host) const {
  std::lock_guard<std::mutex> lk(remote_mu_);
  auto it = remote_.find(host);
  if (it == remote_.end()) it = remote_.emplace(host, !is_local_host(host)).first;
  return it->second;
}

void ElasticAgents::add(std::unique_ptr<RemoteHost> host) {
  auto s = std::make_unique<Session>();
  s->remote = std::move(host);
  s->heard = s->last_beat = now();
  s->out = agentwire::encode(Type::kStart, "");
  Session* raw = s.get();
  {
    std::lock_guard<std::mutex> lk(mu_);
    sessions_[raw->remote->host()] = std::move(s);
  }
  raw->thread = std::thread([this, raw] {
    while (!raw->stop && relay_once(*raw)) {
    }
  });
}

bool ElasticAgents::open(const std::string& host) {
  std::lock_guard<std::mutex> lk(mu_);
  if (openings_.count(host)) return true;
  auto it = sessions_.find(host);
  if (it != sessions_.end() && !it->second->dropped) return false;
  auto o = std::make_unique<Opening>();
  Opening* raw = o.get();
  openings_[host] = std::move(o);
  raw->thread = std::thread([this, raw, host] {
    auto r = opener_(host, raw->abort);
    {
      std::lock_guard<std::mutex> lk(mu_);
      raw->result = std::move(r);
    }
    wake_.wake();
  });
  return true;
}

// Each ended start's thread joined; a started agent's link replaces a lost host's old one.
std::vector<ElasticHosts::Opened> ElasticAgents::opened() {
  std::vector<std::pair<std::string, std::unique_ptr<Opening>>> ended;
  {
    std::lock_guard<std::mutex> lk(mu_);
    for (auto it = openings_.begin(); it != openings_.end();) {
      if (!it->second->result) {
        ++it;
        continue;
      }
      ended.emplace_back(it->first, std::move(it->second));
      it = openings_.erase(it);
    }
  }
  std::vector<Opened> out;
  for (auto& [host, o] : ended) {
    o->thread.join();
    if (!*o->result) {
      out.push_back({host, o->result->error()});
      continue;
    }
    close(host);  // a lost host's old link, if any
    add(std::move(**o->result));
    out.push_back({host, {}});
  }
  return out;
}

// The starts under way told to give up, and waited for: what they made (a link, an agent
// started) is dropped with them.
void ElasticAgents::abort_openings() {
  std::map<std::string, std::unique_ptr<Opening>> pending;
  {
    std::lock_guard<std::mutex> lk(mu_);
    pending.swap(openings_);
  }
  for (auto& [host, o] : pending) o->abort = true;
  for (auto& [host, o] : pending) o->thread.join();
}

ElasticHosts::Liveness ElasticAgents::liveness(const std::string& host) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = sessions_.find(host);
  if (it == sessions_.end()) return {now(), std::string("no agent")};
  return {it->second->heard.load(), it->second->dropped};
}

void ElasticAgents::close(const std::string& host) {
  std::unique_ptr<Session> s;
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = sessions_.find(host);
    if (it == sessions_.end()) return;
    s = std::move(it->second);
    sessions_.erase(it);
  }
  s->stop = true;
  if (s->thread.joinable()) s->thread.join();
  drop(*s, "closed");
  s->remote.reset();  // the link's end: the agent ends what still runs there
}

// One turn of a host's relay: what waits to be sent (as far as the link has room), a
// heartbeat when due, then what the agent sent (20 ms at most). False once the link is gone.
bool ElasticAgents::relay_once(Session& s) {
  HostLink& link = s.remote->link();
  Status sent;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (now() - s.last_beat >= agentwire::kHeartbeatInterval) {
      s.out += agentwire::encode(Type::kHeartbeat, "");
      s.last_beat = now();
    }
    size_t n = std::min(link.write_room(), s.out.size());
    if (n > 0 && (sent = link.write(std::string_view(s.out).substr(0, n)))) s.out.erase(0, n);
    for (auto& [id, w] : workers_)
      if (w->host == s.remote->host())
        for (int k = 0; k < 2; ++k) write_output(*w, k, "");
  }
  if (!sent) return drop(s, sent.error().message), false;
  auto bytes = link.read(20);
  if (!bytes) return drop(s, bytes.error().message), false;
  if (bytes->empty()) return true;
  s.heard = now();
  if (auto st = s.remote->reader().feed(*bytes); !st) return drop(s, st.error().message), false;
  while (auto f = s.remote->reader().next()) take_frame(s, *f);
  return true;
}

void ElasticAgents::take_frame(Session& s, const agentwire::Frame& f) {
  if (f.type == Type::kOutput) {
    int id, stream;
    std::string_view lines;
    if (!agentwire::decode_output(f.payload, &id, &stream, &lines)) return;
    if (id < 0) {
      sink_.notice("hvdrun: host " + s.remote->host() + ": " + std::string(lines.substr(0, lines.size() - 1)));
      return;
    }
    std::lock_guard<std::mutex> lk(mu_);
    if (auto it = workers_.find(id); it != workers_.end() && (stream == 0 || stream == 1))
      write_output(*it->second, stream, lines);
  } else if (f.type == Type::kEnded) {
    if (auto e = decode_ended(f.payload)) ended(e->id, e->status);
  }
}

// Output for the driver's pipe; what the pipe has no room for waits (the relay never blocks).
void ElasticAgents::write_output(Worker& w, int stream, std::string_view lines) {
  std::string& p = w.pending[stream];
  p.append(lines);
  while (!p.empty() && w.pipes[stream].valid()) {
    ssize_t n = ::write(w.pipes[stream].get(), p.data(), p.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    if (n < 0) return p.clear();  // the driver closed its end
    p.erase(0, static_cast<size_t>(n));
  }
}

// A remote worker ended: its output closed (the driver reads to EOF), its status reaped.
void ElasticAgents::ended(pid_t id, int status) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = workers_.find(id);
    if (it == workers_.end()) return;
    for (int k = 0; k < 2; ++k) write_output(*it->second, k, "");  // (what the pipe cannot take now is lost)
    workers_.erase(it);  // its pipes closed: the driver reads to EOF
    reaped_.emplace_back(id, status);
  }
  wake_.wake();
}

// The host's link is gone: its workers forgotten, their pipes closed (the driver, told by
// liveness(), counts them as killed: no end of theirs will come).
void ElasticAgents::drop(Session& s, const std::string& why) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!s.dropped) s.dropped = why;
    for (auto it = workers_.begin(); it != workers_.end();)
      it = it->second->host == s.remote->host() ? workers_.erase(it) : std::next(it);
  }
  wake_.wake();
}

Result<SpawnedWorker> ElasticAgents::spawn(const SpawnRequest& req) {
  const std::string& host = req.host;
  if (host.empty() || !remote(host)) return local_.spawn(req);
  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) != 0) return make_error(ErrorKind::kLaunchFailed, "pipe2 failed");
  if (pipe2(err, O_CLOEXEC) != 0) {
    ::close(out[0]), ::close(out[1]);
    return make_error(ErrorKind::kLaunchFailed, "pipe2 failed");
  }
  SpawnedWorker sw;
  sw.out.reset(out[0]);
  sw.err.reset(err[0]);
  auto w = std::make_unique<Worker>();
  w->host = host;
  w->pipes[0].reset(out[1]);
  w->pipes[1].reset(err[1]);
  for (auto& p : w->pipes) fcntl(p.get(), F_SETFL, O_NONBLOCK);
  std::lock_guard<std::mutex> lk(mu_);
  sw.pid = next_id_++;
  auto it = sessions_.find(host);
  if (it == sessions_.end() || it->second->dropped) return sw;  // no agent: the driver finds the host lost
  it->second->out += agentwire::encode(Type::kSpawn, encode_spawn({sw.pid, req.argv, req.env}));
  workers_[sw.pid] = std::move(w);
  return sw;
}

std::vector<std::pair<pid_t, int>> ElasticAgents::reap() {
  auto out = local_.reap();
  std::lock_guard<std::mutex> lk(mu_);
  out.insert(out.end(), reaped_.begin(), reaped_.end());
  reaped_.clear();
  return out;
}

void ElasticAgents::signal_group(pid_t pgid, int sig) {
  if (pgid < kFirstRemoteId) return local_.signal_group(pgid, sig);
  std::lock_guard<std::mutex> lk(mu_);
  auto w = workers_.find(pgid);
  if (w == workers_.end()) return;
  auto s = sessions_.find(w->second->host);
  if (s != sessions_.end() && !s->second->dropped) s->second->out += agentwire::encode(Type::kKill, encode_kill({pgid, sig}));
}

bool ElasticAgents::group_alive(pid_t pgid) {
  if (pgid < kFirstRemoteId) return local_.group_alive(pgid);
  std::lock_guard<std::mutex> lk(mu_);
  return workers_.count(pgid) > 0;
}

size_t ElasticAgents::remote_workers() const {
  std::lock_guard<std::mutex> lk(mu_);
  return workers_.size();
}

// The driver's wait, woken also when a remote worker ends or a link drops.
int ElasticAgents::wait(pollfd* fds, size_t n, int timeout_ms) {
  std::vector<pollfd> all(fds, fds + n);
  all.push_back({wake_.fd(), POLLIN, 0});
  int r = local_.wait(all.data(), all.size(), timeout_ms);
  if (r <= 0) return r;
  for (size_t i = 0; i < n; ++i) fds[i].revents = all[i].revents;
  if (all[n].revents) {
    wake_.drain();
    --r;
  }
  return r;
}

}  // namespace hvdrun
