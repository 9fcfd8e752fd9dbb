#include "launcher/host_link.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <libssh/libssh.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstring>
#include <mutex>
#include <optional>

#include "launcher/exit_status.h"
#include "common/deadline.h"
#include "common/net.h"
#include "common/socket_io.h"
#include "common/strings.h"
#include "common/unique_fd.h"
#include "launcher/spawn.h"

extern char** environ;

namespace hvdrun {

namespace {

// libssh's blocking calls (handshake, authentication, channel requests, the exit status,
// closing) wait at most the session's time-out: set before each, so that together they
// keep one deadline.
void set_session_timeout(ssh_session s, double seconds) {
  seconds = std::max(seconds, 0.001);
  long sec = static_cast<long>(seconds);
  long usec = static_cast<long>((seconds - static_cast<double>(sec)) * 1e6);
  ssh_options_set(s, SSH_OPTIONS_TIMEOUT, &sec);
  ssh_options_set(s, SSH_OPTIONS_TIMEOUT_USEC, &usec);
}

constexpr double kCloseTimeout = 1;  // closing a channel or session to a host that vanished

struct SessionFree {
  void operator()(ssh_session s) const {
    set_session_timeout(s, kCloseTimeout);
    ssh_disconnect(s);
    ssh_free(s);
  }
};
struct ChannelFree {
  void operator()(ssh_channel c) const {
    ssh_channel_close(c);
    ssh_channel_free(c);
  }
};
struct KeyFree {
  void operator()(ssh_key k) const { ssh_key_free(k); }
};
using Session = std::unique_ptr<std::remove_pointer_t<ssh_session>, SessionFree>;
using Channel = std::unique_ptr<std::remove_pointer_t<ssh_channel>, ChannelFree>;
using Key = std::unique_ptr<std::remove_pointer_t<ssh_key>, KeyFree>;

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

constexpr size_t kStderrKept = 64 << 10;  // of a remote command's stderr, for messages

// libssh's connect errors, in the words the issue tracker asks for.
std::string connect_cause(const std::string& raw) {
  std::string l = lower(raw);
  if (l.find("refused") != std::string::npos) return "connection refused";
  if (l.find("no route") != std::string::npos) return "no route to host";
  if (l.find("unreachable") != std::string::npos) return "network is unreachable";
  if (l.find("timeout") != std::string::npos || l.find("timed out") != std::string::npos)
    return "connection timed out";
  if (l.find("resolve") != std::string::npos) return "cannot resolve the host name (" + raw + ")";
  return raw;
}

class SshLink : public HostLink {
  static constexpr double kExitStatusWait = 2;

 public:
  ~SshLink() override { set_session_timeout(session_.get(), kCloseTimeout); }  // before the channel closes

  SshLink(Session s, Channel c, std::string label) : session_(std::move(s)), channel_(std::move(c)), label_(std::move(label)) {}
  const std::string& label() const override { return label_; }

  Status write(std::string_view data) override {
    size_t off = 0;
    while (off < data.size()) {
      int n = ssh_channel_write(channel_.get(), data.data() + off, static_cast<uint32_t>(data.size() - off));
      if (n == SSH_ERROR) return make_error(ErrorKind::kLaunchFailed, label_ + ": " + ssh_get_error(session_.get()));
      off += static_cast<size_t>(n);
    }
    return {};
  }

  size_t write_room() override { return ssh_channel_window_size(channel_.get()); }

  Result<std::string> read(int timeout_ms) override {
    char buf[65536];
    drain_stderr();
    int n = ssh_channel_read_timeout(channel_.get(), buf, sizeof buf, 0, timeout_ms);
    if (n == SSH_ERROR) return make_error(ErrorKind::kLaunchFailed, label_ + ": connection lost (" + std::string(ssh_get_error(session_.get())) + ")");
    if (n > 0) return std::string(buf, static_cast<size_t>(n));
    drain_stderr();
    if (ssh_channel_is_eof(channel_.get()) || !ssh_channel_is_open(channel_.get()))
      return make_error(ErrorKind::kPeerLost, label_ + ": the agent closed its output");
    return std::string();
  }

  std::string stderr_text() override {
    drain_stderr();
    return err_;
  }

  // Only once the agent's side has ended (EOF or closed): libssh would otherwise wait for
  // an exit status that a silent host never sends. The status follows the EOF closely.
  std::optional<int> exit_status() override {
    if (ssh_channel_is_open(channel_.get()) && !ssh_channel_is_eof(channel_.get())) return std::nullopt;
    set_session_timeout(session_.get(), kExitStatusWait);
    int st = ssh_channel_get_exit_status(channel_.get());
    if (st < 0) return std::nullopt;
    return st;
  }

  std::string local_address() const override { return socket_local_address(ssh_get_fd(session_.get())); }
  std::string peer_address() const override { return socket_peer_address(ssh_get_fd(session_.get())); }

 private:
  void drain_stderr() {
    char buf[4096];
    while (true) {
      int n = ssh_channel_read_nonblocking(channel_.get(), buf, sizeof buf, 1);
      if (n <= 0) break;
      if (err_.size() < kStderrKept) err_.append(buf, static_cast<size_t>(n));
    }
  }

  Session session_;
  Channel channel_;  // declared after the session: closed before it
  std::string label_;
  std::string err_;
};

}  // namespace

namespace {

// Opens `ss` for `host` with the user's ~/.ssh/config and our options; the host's label
// ("host:port", for every message about it).
Result<std::string> configure_session(ssh_session ss, const std::string& host, const SshSettings& s) {
  ssh_options_set(ss, SSH_OPTIONS_HOST, host.c_str());
  if (!s.ssh_dir.empty()) ssh_options_set(ss, SSH_OPTIONS_SSH_DIR, s.ssh_dir.c_str());
  // The user's ~/.ssh/config (User, Port, IdentityFile, HostName, ...), then our options.
  std::string config = s.ssh_dir + "/config";
  struct stat st {};
  if (!s.ssh_dir.empty() && stat(config.c_str(), &st) == 0 && ssh_options_parse_config(ss, config.c_str()) != 0)
    return make_error(ErrorKind::kLaunchFailed, host + ": cannot parse " + config + ": " + ssh_get_error(ss));
  int no = 0;
  ssh_options_set(ss, SSH_OPTIONS_PROCESS_CONFIG, &no);
  if (s.port > 0) ssh_options_set(ss, SSH_OPTIONS_PORT, &s.port);
  unsigned int port = 22;
  ssh_options_get_port(ss, &port);
  std::string label = host + ":" + std::to_string(port);
  return label;
}

// The blocking steps of one SSH connection after its options, in order. Every one keeps
// one deadline: a host that stops answering half-way (a network cut during the handshake
// or the authentication) fails in time too.
struct SshConnecting {
  ssh_session ss;
  const std::string& label;
  SteadyClock::time_point deadline;

  std::optional<Error> timed_out(const char* during) const {
    if (seconds_until(deadline) > 0) return std::nullopt;
    return error_of(ErrorKind::kUnreachableHost, label + ": connection timed out (" + during + ")");
  }
  void bound() const { set_session_timeout(ss, seconds_until(deadline)); }

  Status connect() {
    bound();
    if (ssh_connect(ss) != SSH_OK) return make_error(ErrorKind::kUnreachableHost, label + ": " + connect_cause(ssh_get_error(ss)));
    fcntl(ssh_get_fd(ss), F_SETFD, FD_CLOEXEC);  // workers must not hold the connection open
    return {};
  }

  Status check_host_key(const SshSettings& s) {
    if (s.host_key_policy == HostKeyPolicy::kNo) return {};
    bound();
    switch (ssh_session_is_known_server(ss)) {
      case SSH_KNOWN_HOSTS_OK:
        break;
      case SSH_KNOWN_HOSTS_CHANGED:
      case SSH_KNOWN_HOSTS_OTHER:
        return make_error(ErrorKind::kAuth, label + ": host key changed: it does not match known_hosts (" + s.ssh_dir +
                          "/known_hosts); if the host was reinstalled, remove its old key with ssh-keygen -R");
      case SSH_KNOWN_HOSTS_UNKNOWN:
      case SSH_KNOWN_HOSTS_NOT_FOUND:
        if (s.host_key_policy == HostKeyPolicy::kYes)
          return make_error(ErrorKind::kAuth, label + ": host key unknown, and --ssh-host-key-checking is yes (add it to " + s.ssh_dir +
                            "/known_hosts first)");
        if (ssh_session_update_known_hosts(ss) != SSH_OK)
          return make_error(ErrorKind::kLaunchFailed, label + ": cannot add the host key to known_hosts: " + ssh_get_error(ss));
        break;
      case SSH_KNOWN_HOSTS_ERROR:
        return make_error(ErrorKind::kLaunchFailed, label + ": cannot check the host key: " + ssh_get_error(ss));
    }
    return {};
  }

  Status authenticate(const SshSettings& s) {
    int rc;
    if (!s.identity_file.empty()) {
      ssh_key raw = nullptr;
      if (ssh_pki_import_privkey_file(s.identity_file.c_str(), nullptr, nullptr, nullptr, &raw) != SSH_OK)
        return make_error(ErrorKind::kLaunchFailed, label + ": cannot read the identity file " + s.identity_file +
                          " (missing, unreadable, or protected by a passphrase)");
      Key key(raw);
      bound();
      rc = ssh_userauth_publickey(ss, nullptr, key.get());
    } else {
      bound();
      rc = ssh_userauth_publickey_auto(ss, nullptr, nullptr);
    }
    if (rc != SSH_AUTH_SUCCESS) {
      if (auto e = timed_out("authentication")) return *e;
      return make_error(ErrorKind::kAuth, label + ": authentication failed (publickey)");
    }
    return {};
  }

  // A session channel running `command` (the agent).
  Result<Channel> run(const std::string& command) {
    bound();
    Channel channel(ssh_channel_new(ss));
    if (!channel || ssh_channel_open_session(channel.get()) != SSH_OK) {
      if (auto e = timed_out("opening a session channel")) return *e;
      return make_error(ErrorKind::kLaunchFailed, label + ": cannot open a session channel: " + ssh_get_error(ss));
    }
    bound();
    if (ssh_channel_request_exec(channel.get(), command.c_str()) != SSH_OK) {
      if (auto e = timed_out("starting the agent")) return *e;
      return make_error(ErrorKind::kLaunchFailed, label + ": cannot run the agent: " + ssh_get_error(ss));
    }
    return channel;
  }
};

}  // namespace

Result<std::unique_ptr<HostLink>> open_ssh_link(const std::string& host, const SshSettings& s,
                                                const std::string& command) {
  static std::once_flag init;
  std::call_once(init, [] { ssh_init(); });
  Session session(ssh_new());
  if (!session) return make_error(ErrorKind::kLaunchFailed, host + ": cannot create an SSH session");
  auto label = configure_session(session.get(), host, s);
  if (!label) return label.error();
  SshConnecting c{session.get(), *label, deadline_in(s.connect_timeout)};
  if (auto st = c.connect(); !st) return st.error();
  if (auto st = c.check_host_key(s); !st) return st.error();
  if (auto st = c.authenticate(s); !st) return st.error();
  auto channel = c.run(command);
  if (!channel) return channel.error();
  return std::unique_ptr<HostLink>(new SshLink(std::move(session), std::move(*channel), *label));
}

namespace {

// How long a launch command's client gets to end after SIGTERM at the end of the job.
constexpr std::chrono::seconds kClientGrace{2};

class CommandLink : public HostLink {
 public:
  CommandLink(pid_t pid, UniqueFd in, UniqueFd out, UniqueFd err, std::string label)
      : pid_(pid), in_(std::move(in)), out_(std::move(out)), err_fd_(std::move(err)), label_(std::move(label)) {}
  ~CommandLink() override {
    in_.reset();
    out_.reset();
    err_fd_.reset();
    if (pid_ > 0 && !status_) {
      // Still ours? hvdrun's loop reaps every child (waitpid(-1): it is a subreaper), this
      // client too once it has ended, maybe hours before the job does: its pid (and group
      // id) may then be another process's, which the signals below would hit.
      int st0;
      pid_t r0;
      while ((r0 = waitpid(pid_, &st0, WNOHANG)) < 0 && errno == EINTR) {
      }
      if (r0 < 0) return;  // reaped already: not ours any more
      // The client only: the agent ends on the EOF it sees. SIGCONT first: a stopped client
      // (SIGSTOP, a paused container) holds SIGTERM, and a blocking wait on it held hvdrun
      // forever after it had reported the lost contact (found by the chaos suite); SIGKILL
      // if it has not ended within kClientGrace.
      kill(-pid_, SIGCONT);
      kill(-pid_, SIGTERM);
      if (r0 == pid_) return;  // it had ended (reaped just now): that was for what is left of its group
      int st;
      auto deadline = std::chrono::steady_clock::now() + kClientGrace;
      while (true) {
        pid_t r = waitpid(pid_, &st, WNOHANG);
        if (r == pid_ || (r < 0 && errno != EINTR)) return;
        if (std::chrono::steady_clock::now() >= deadline) break;
        usleep(10000);
      }
      kill(-pid_, SIGKILL);
      while (waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
      }
    }
  }
  const std::string& label() const override { return label_; }

  Status write(std::string_view data) override {
    if (auto s = write_all(in_.get(), data); !s)
      return make_error(ErrorKind::kLaunchFailed, label_ + ": connection lost (the ssh client's stdin: " + s.error().message + ")");
    return {};
  }

  // A pipe that polls writable takes PIPE_BUF bytes without blocking.
  size_t write_room() override {
    pollfd p{in_.get(), POLLOUT, 0};
    return poll(&p, 1, 0) == 1 && (p.revents & POLLOUT) ? PIPE_BUF : 0;
  }

  Result<std::string> read(int timeout_ms) override {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    char buf[65536];
    while (true) {
      pollfd p[2] = {{out_.get(), POLLIN, 0}, {err_fd_.valid() ? err_fd_.get() : -1, POLLIN, 0}};
      int n = poll(p, 2, std::max(0, ms_until(deadline)));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return std::string();
      if (p[1].revents) read_stderr();
      if (p[0].revents) {
        ssize_t r = ::read(out_.get(), buf, sizeof buf);
        if (r > 0) return std::string(buf, static_cast<size_t>(r));
        if (r < 0 && errno == EINTR) continue;
        return make_error(ErrorKind::kPeerLost, label_ + ": the agent closed its output");
      }
    }
  }

  std::string stderr_text() override {
    while (err_fd_.valid()) {
      pollfd p{err_fd_.get(), POLLIN, 0};
      if (poll(&p, 1, 0) <= 0) break;
      read_stderr();
    }
    return err_;
  }

  std::optional<int> exit_status() override {
    if (!status_) {
      int st = 0;
      // Before the job starts nobody else reaps; afterwards the agent loop may have.
      for (int i = 0; i < 100; ++i) {
        pid_t r = waitpid(pid_, &st, WNOHANG);
        if (r == pid_) {
          status_ = exit_code_of(st);
          break;
        }
        if (r < 0) break;
        usleep(10000);
      }
    }
    return status_;
  }

  std::string local_address() const override { return ""; }
  std::string peer_address() const override { return ""; }

 private:
  // One read of the client's stderr (kept up to kStderrKept bytes); closed at its end.
  void read_stderr() {
    char buf[4096];
    ssize_t r = ::read(err_fd_.get(), buf, sizeof buf);
    if (r <= 0) err_fd_.reset();
    else if (err_.size() < kStderrKept) err_.append(buf, static_cast<size_t>(r));
  }

  pid_t pid_;
  UniqueFd in_, out_, err_fd_;
  std::string label_;
  std::string err_;
  std::optional<int> status_;
};

}  // namespace

Result<std::unique_ptr<HostLink>> open_command_link(const std::vector<std::string>& argv, const std::string& label) {
  const std::string& host = label;
  const char* path = std::getenv("PATH");
  auto exe = resolve_program(argv[0], path ? path : "");
  if (!exe) return error_of(ErrorKind::kUsage, host + ": " + exe.error().message);
  int in[2];
  if (pipe2(in, O_CLOEXEC) != 0) return make_sys_error(ErrorKind::kLaunchFailed, host + ": pipe: " + std::strerror(errno), errno);
  UniqueFd in_rd(in[0]), in_wr(in[1]);
  SpawnRequest req;
  req.exe = *exe;
  req.argv = argv;
  for (char** e = environ; *e; ++e) req.env.push_back(*e);
  req.stdin_fd = in_rd.get();
  auto spawned = spawn_worker(req);
  if (!spawned) return make_error(ErrorKind::kLaunchFailed, host + ": " + spawned.error().message);
  return std::unique_ptr<HostLink>(
      new CommandLink(spawned->pid, std::move(in_wr), std::move(spawned->out), std::move(spawned->err), host));
}

}  // namespace hvdrun
