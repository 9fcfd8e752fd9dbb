#include "launcher/starter.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include <openssl/crypto.h>
#include <openssl/rand.h>

#include "launcher/exit_status.h"
#include "common/net.h"
#include "common/socket_io.h"
#include "common/strings.h"
#include "common/unique_fd.h"
#include "launcher/agent_messages.h"
#include "launcher/agent_wire.h"
#include "launcher/launch_command.h"
#include "launcher/spawn.h"

extern char** environ;

namespace hvdrun {
namespace {

using Clock = std::chrono::steady_clock;

class SshStarter : public AgentStarter {
 public:
  explicit SshStarter(StarterSettings s) : s_(std::move(s)) {}
  Result<std::unique_ptr<HostLink>> open(const std::string& host, Clock::time_point deadline) override {
    if (!s_.ssh_command.empty()) {
      auto argv = ssh_command_argv(s_.ssh_command, s_.ssh.port, s_.ssh.identity_file, host, s_.remote_hvdrun,
                                   s_.start_timeout);
      if (!argv) return argv.error();
      return open_command_link(*argv, host);
    }
    SshSettings ssh = s_.ssh;
    ssh.connect_timeout = std::max(0.001, std::chrono::duration<double>(deadline - Clock::now()).count());
    return open_ssh_link(host, ssh, ssh_remote_command(s_.remote_hvdrun, s_.start_timeout));
  }
  // SSH's own banner and the MOTD never reach a command's stdout; a startup file does.
  std::string text_before_agent(const std::string& text) const override {
    return "the remote shell printed text on stdout before the agent started: '" + text +
           "' (a shell startup file such as ~/.bashrc must print nothing when the shell is not interactive)";
  }

 private:
  StarterSettings s_;
};

class TemplateStarter : public AgentStarter {
 public:
  explicit TemplateStarter(StarterSettings s) : s_(std::move(s)) {}
  Result<std::unique_ptr<HostLink>> open(const std::string& host, Clock::time_point) override {
    auto argv = template_argv(s_.launch_command, host, s_.remote_hvdrun, s_.start_timeout);
    if (!argv) return argv.error();
    return open_command_link(*argv, host);
  }
  std::string text_before_agent(const std::string& text) const override {
    return "the launch command printed text on stdout before the agent started: '" + text + "'";
  }

 private:
  StarterSettings s_;
};

// What the srun child printed, by task (srun --label: "3: text"); srun's own lines go
// with task 0's, as the first host's, in the order they came: each task's text only
// grows, as HostLink::stderr_text promises (the relay shows what follows the part it
// showed). Kept apart and joined on each call, srun's line after task 0's shifted task
// 0's under the relay's offset: the end of a line was shown again and srun's was lost.
// srun's lines and each task's are kept up to kKept bytes each.
struct SrunOutput {
  static constexpr size_t kKept = 64u << 10;
  std::mutex mu;
  std::vector<std::string> by_task;
  std::vector<size_t> task_bytes;
  size_t own_bytes = 0;
  std::string last;  // the last line, whoever's
  bool closed = false;  // both of srun's pipes (under mu)
  std::condition_variable closed_cv;
  void start(size_t tasks) {
    std::lock_guard<std::mutex> lk(mu);
    by_task.assign(tasks, "");
    task_bytes.assign(tasks, 0);
  }
  void add_line(const std::string& line) {
    // srun's warning about --cpu-bind=none where Slurm binds nothing anyway (task/none).
    if (line.find("cluster configuration lacks support for cpu binding") != std::string::npos) return;
    std::lock_guard<std::mutex> lk(mu);
    size_t colon = line.find(": ");
    if (colon != std::string::npos && colon > 0 && colon < 8) {
      std::string id = line.substr(0, colon);
      id.erase(0, id.find_first_not_of(' '));
      auto n = parse_int(id, "task", 0, 1 << 24);
      if (n && static_cast<size_t>(*n) < by_task.size()) {
        last = line.substr(colon + 2);
        keep(*n, last, &task_bytes[*n]);
        return;
      }
    }
    last = line;
    keep(0, line, &own_bytes);
  }
  std::string text(int task) {
    std::lock_guard<std::mutex> lk(mu);
    return task >= 0 && static_cast<size_t>(task) < by_task.size() ? by_task[task] : "";
  }
  std::string last_line() {
    std::lock_guard<std::mutex> lk(mu);
    return last;
  }
  // srun's pipes both closed: every line it wrote is here.
  void close() {
    std::lock_guard<std::mutex> lk(mu);
    closed = true;
    closed_cv.notify_all();
  }
  // Waits (up to `until`) for close(): srun has ended, its last lines may still be in the pipes.
  void wait_closed(std::chrono::steady_clock::time_point until) {
    std::unique_lock<std::mutex> lk(mu);
    closed_cv.wait_until(lk, until, [this] { return closed; });
  }

 private:
  void keep(size_t task, const std::string& line, size_t* budget) {
    if (task >= by_task.size() || *budget >= kKept) return;
    by_task[task] += line + "\n";
    *budget += line.size() + 1;
  }
};

// The stream to an agent that dialed back: a connected TCP socket.
class SocketLink : public HostLink {
 public:
  SocketLink(UniqueFd fd, std::string label, std::shared_ptr<SrunOutput> out, int task)
      : fd_(std::move(fd)), label_(std::move(label)), out_(std::move(out)), task_(task) {}
  const std::string& label() const override { return label_; }
  Status write(std::string_view data) override {
    if (auto s = write_all(fd_.get(), data); !s) return make_error(ErrorKind::kLaunchFailed,
                                                                   label_ + ": connection lost (" + s.error().message + ")");
    return {};
  }
  size_t write_room() override {
    pollfd p{fd_.get(), POLLOUT, 0};
    return poll(&p, 1, 0) == 1 && (p.revents & POLLOUT) ? 4096 : 0;
  }
  Result<std::string> read(int timeout_ms) override {
    auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
    char buf[65536];
    while (true) {
      pollfd p{fd_.get(), POLLIN, 0};
      int n = poll(&p, 1, ms_until(deadline));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return std::string();
      ssize_t r = ::read(fd_.get(), buf, sizeof buf);
      if (r > 0) return std::string(buf, static_cast<size_t>(r));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) return make_sys_error(ErrorKind::kLaunchFailed,
                                       label_ + ": connection lost (" + std::strerror(errno) + ")", errno);
      return make_error(ErrorKind::kPeerLost, label_ + ": the agent closed its output");
    }
  }
  std::string stderr_text() override { return out_->text(task_); }
  std::optional<int> exit_status() override { return std::nullopt; }
  std::string local_address() const override { return socket_local_address(fd_.get()); }
  std::string peer_address() const override { return socket_peer_address(fd_.get()); }

 private:
  UniqueFd fd_;
  std::string label_;
  std::shared_ptr<SrunOutput> out_;
  int task_;
};

// A socket on every address, any port, for the agents to connect back to; `a` is its address.
Result<UniqueFd> listen_for_agents(sockaddr_in& a) {
  UniqueFd l(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  int one = 1;
  a.sin_family = AF_INET;
  socklen_t len = sizeof a;
  if (!l.valid() || setsockopt(l.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
      bind(l.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(l.get(), 1024) != 0 ||
      getsockname(l.get(), reinterpret_cast<sockaddr*>(&a), &len) != 0)
    return error_of(ErrorKind::kLaunchFailed, std::string("srun launch: cannot listen for the agents: ") + std::strerror(errno));
  return l;
}

// The addresses the agents may reach us at: every one of ours (loopback last; an agent
// tries it only when it shares this machine's network stack).
std::string agent_dial_addresses() {
  std::string addrs;
  if (auto all = interface_addresses())
    for (const auto& i : *all)
      if (!i.v6 && i.addr.rfind("127.", 0) != 0) addrs += (addrs.empty() ? "" : ",") + i.addr;
  addrs += std::string(addrs.empty() ? "" : ",") + "127.0.0.1";
  return addrs;
}

// srun's stdout and stderr, line by line into `out`, until both close.
void relay_srun_output(std::shared_ptr<SrunOutput> out, UniqueFd o, UniqueFd e) {
  std::string part[2];
  UniqueFd* fds[2] = {&o, &e};
  while (o.valid() || e.valid()) {
    pollfd p[2] = {{o.valid() ? o.get() : -1, POLLIN, 0}, {e.valid() ? e.get() : -1, POLLIN, 0}};
    if (poll(p, 2, 1000) < 0 && errno != EINTR) break;
    for (int i = 0; i < 2; ++i) {
      if (!p[i].revents) continue;
      char buf[4096];
      ssize_t r = ::read(fds[i]->get(), buf, sizeof buf);
      if (r <= 0) {
        if (!part[i].empty()) out->add_line(part[i]);
        fds[i]->reset();
        continue;
      }
      part[i].append(buf, static_cast<size_t>(r));
      for (size_t nl; (nl = part[i].find('\n')) != std::string::npos; part[i].erase(0, nl + 1))
        out->add_line(part[i].substr(0, nl));
    }
  }
  out->close();
}

// One `srun` step with one agent per node; the agents connect back to a socket of ours.
class SrunStarter : public AgentStarter {
 public:
  explicit SrunStarter(StarterSettings s) : s_(std::move(s)), out_(std::make_shared<SrunOutput>()) {}
  ~SrunStarter() override {
    stop_ = true;
    if (accept_thread_.joinable()) accept_thread_.join();
    end_srun();
    if (output_thread_.joinable()) output_thread_.join();
  }

  // One srun step starts every host's agent, at the job's start. A host that an elastic job
  // adds later (its own begin) is refused with why, not started in a second step.
  Status begin(const std::vector<std::string>& hosts, Clock::time_point deadline) override {
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (begun_) {
        std::string names;
        for (const auto& h : hosts) names += (names.empty() ? "" : ",") + h;
        return error_of(ErrorKind::kLaunchFailed,
                        names + ": --launcher slurm starts every agent in one srun step when the job "
                                           "starts; a host added later cannot join it (use --launcher ssh or command "
                                           "for an elastic job that adds hosts)");
      }
      begun_ = true;
    }
    Status st = start_step(hosts, deadline);
    if (!st) {  // nothing runs yet (the threads start last): a later begin tries again
      std::lock_guard<std::mutex> lk(mu_);
      begun_ = false;
    }
    return st;
  }

  Result<std::unique_ptr<HostLink>> open(const std::string& host, Clock::time_point deadline) override {
    std::unique_lock<std::mutex> lk(mu_);
    while (true) {
      if (auto it = attached_.find(host); it != attached_.end()) {
        auto link = std::unique_ptr<HostLink>(new SocketLink(std::move(it->second.fd), host, out_, it->second.task));
        attached_.erase(it);
        return link;
      }
      if (srun_status_) {
        std::string why = "srun ended (exit " + std::to_string(exit_code_of(*srun_status_)) +
                          ") before the agent there connected back";
        std::string last = out_->last_line();
        return error_of(ErrorKind::kLaunchFailed, host + ": " + why + (last.empty() ? "" : ": " + last));
      }
      if (!error_.empty()) return error_of(ErrorKind::kLaunchFailed, host + ": " + error_);
      if (Clock::now() >= deadline)
        return error_of(ErrorKind::kLaunchFailed, host + ": the agent started by srun did not connect back within --start-timeout (" +
                              std::to_string(static_cast<int>(s_.start_timeout)) + " s)");
      cv_.wait_until(lk, std::min(deadline, Clock::now() + std::chrono::milliseconds(200)));
    }
  }

 private:
  Status start_step(const std::vector<std::string>& hosts, Clock::time_point deadline) {
    hosts_ = hosts;
    out_->start(hosts.size());
    sockaddr_in a{};
    auto l = listen_for_agents(a);
    if (!l) return l.error();
    listen_ = std::move(*l);
    unsigned char raw[32];
    if (RAND_bytes(raw, sizeof raw) != 1) return error_of(ErrorKind::kLaunchFailed, "srun launch: no random bytes for the agents' token");
    token_ = to_hex(raw, sizeof raw);
    auto req = srun_request(hosts, std::to_string(ntohs(a.sin_port)) + " " + agent_dial_addresses());
    if (!req) return req.error();
    auto spawned = spawn_worker(*req);
    if (!spawned) return error_of(ErrorKind::kLaunchFailed, "--launcher slurm: cannot start srun: " + spawned.error().message);
    pid_ = spawned->pid;
    output_thread_ = std::thread(relay_srun_output, out_, std::move(spawned->out), std::move(spawned->err));
    accept_thread_ = std::thread([this, deadline] { accept_agents(deadline); });
    return {};
  }

  struct Attached {
    UniqueFd fd;
    int task = -1;
  };

  // srun's command line and environment: every host's agent, told where to dial back
  // (`dial`: "PORT ADDR,...") and the token to prove.
  Result<SpawnRequest> srun_request(const std::vector<std::string>& hosts, const std::string& dial) const {
    auto argv = srun_argv(hosts, s_.remote_hvdrun, s_.start_timeout);
    const char* path = std::getenv("PATH");
    auto exe = resolve_program(argv[0], path ? path : "");
    if (!exe) return error_of(ErrorKind::kLaunchFailed, "--launcher slurm: " + exe.error().message + " (Slurm's srun must be on PATH)");
    SpawnRequest req;
    req.exe = *exe;
    req.argv = argv;
    for (char** e = environ; *e; ++e)
      if (!starts_with(*e, "HVDRUN_AGENT_")) req.env.push_back(*e);
    req.env.push_back("HVDRUN_AGENT_CONNECT=" + dial);
    req.env.push_back("HVDRUN_AGENT_TOKEN=" + token_);
    req.env.push_back("HVDRUN_AGENT_STACK=" + network_stack_id());
    return req;
  }

  // Accepts until every host's agent is here, srun has ended, or the deadline passed. A
  // connection without the token in its first frame is dropped.
  void accept_agents(Clock::time_point deadline) {
    size_t done = 0;
    while (!stop_ && done < hosts_.size() && Clock::now() < deadline) {
      {
        int st = 0;
        if (pid_ > 0 && waitpid(pid_, &st, WNOHANG) == pid_) {
          // Its last words (the reason the error names) before the error that names them; a
          // pipe held open by a process srun left behind bounds the wait.
          out_->wait_closed(std::min(deadline, Clock::now() + std::chrono::seconds(1)));
          std::lock_guard<std::mutex> lk(mu_);
          srun_status_ = st;
          pid_ = -1;
          cv_.notify_all();
          break;
        }
      }
      pollfd p{listen_.get(), POLLIN, 0};
      if (poll(&p, 1, 100) <= 0) continue;
      UniqueFd c(accept4(listen_.get(), nullptr, nullptr, SOCK_CLOEXEC));
      if (!c.valid()) continue;
      auto frame_deadline = std::min(deadline, Clock::now() + std::chrono::seconds(5));
      unsigned char hdr[5];
      if (!read_exact(c.get(), hdr, sizeof hdr, frame_deadline)) continue;
      uint32_t n = (uint32_t(hdr[0]) << 24) | (uint32_t(hdr[1]) << 16) | (uint32_t(hdr[2]) << 8) | hdr[3];
      if (hdr[4] != static_cast<uint8_t>(agentwire::Type::kAttach) || n < 1 || n > 4096) continue;
      std::string payload(n - 1, '\0');
      if (!read_exact(c.get(), payload.data(), payload.size(), frame_deadline)) continue;
      auto att = decode_attach(payload);
      if (!att || att->token.size() != token_.size() ||
          CRYPTO_memcmp(att->token.data(), token_.data(), token_.size()) != 0)
        continue;
      int fl = fcntl(c.get(), F_GETFL);
      fcntl(c.get(), F_SETFL, fl & ~O_NONBLOCK);
      std::lock_guard<std::mutex> lk(mu_);
      if (std::find(hosts_.begin(), hosts_.end(), att->node) == hosts_.end()) {
        error_ = "an agent started by srun says it runs on node '" + att->node +
                 "', which is not one of the job's hosts (with --launcher slurm, -H must name Slurm nodes)";
        cv_.notify_all();
        break;
      }
      if (attached_.count(att->node) || seen_.count(att->node)) continue;
      seen_[att->node] = true;
      attached_[att->node] = {std::move(c), att->task};
      ++done;
      cv_.notify_all();
    }
    listen_.reset();
  }

  // After the job: the agents have ended (their streams closed), so srun ends by itself;
  // if it does not, it is ended (it forwards SIGTERM to the agents).
  void end_srun() {
    if (pid_ <= 0) return;
    for (int i = 0; i < 200; ++i) {
      int st;
      pid_t r = waitpid(pid_, &st, WNOHANG);
      if (r == pid_ || (r < 0 && errno == ECHILD)) return;  // (hvdrun's loop may have reaped it)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    kill(-pid_, SIGTERM);
    for (int i = 0; i < 100; ++i) {
      int st;
      if (waitpid(pid_, &st, WNOHANG) != 0) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    kill(-pid_, SIGKILL);
    int st;
    waitpid(pid_, &st, 0);
  }

  StarterSettings s_;
  std::shared_ptr<SrunOutput> out_;
  std::vector<std::string> hosts_;
  UniqueFd listen_;
  std::string token_;
  pid_t pid_ = -1;
  std::thread accept_thread_, output_thread_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  bool begun_ = false;  // under mu_: begin() ran (its step is the job's only one)
  std::condition_variable cv_;
  std::map<std::string, Attached> attached_;
  std::map<std::string, bool> seen_;
  std::optional<int> srun_status_;
  std::string error_;
};

}  // namespace

std::unique_ptr<AgentStarter> make_starter(LauncherKind kind, const StarterSettings& s) {
  switch (kind) {
    case LauncherKind::kSlurm: return std::make_unique<SrunStarter>(s);
    case LauncherKind::kCommand: return std::make_unique<TemplateStarter>(s);
    default: return std::make_unique<SshStarter>(s);
  }
}

}  // namespace hvdrun
