#include "launcher/spawn.h"

#include <sys/wait.h>

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <poll.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>

#include "launcher/exit_status.h"
#include "common/strings.h"

namespace hvdrun {
namespace {

Result<std::string> check_executable(const std::string& path, const std::string& program) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return error_of(ErrorKind::kNotFound, program + ": " + std::strerror(errno));
  if (S_ISDIR(st.st_mode)) return error_of(ErrorKind::kNotExecutable, program + ": is a directory");
  if ((st.st_mode & 0111) == 0 || access(path.c_str(), X_OK) != 0) return error_of(ErrorKind::kNotExecutable, program + ": permission denied");
  return path;
}

}  // namespace

const std::vector<int>& handled_signals() {
  static const std::vector<int> s = {SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGTSTP, SIGCONT};
  return s;
}

Result<std::string> resolve_program(const std::string& program, const std::string& path) {
  if (program.empty()) return error_of(ErrorKind::kUsage, "empty command");
  if (program.find('/') != std::string::npos) return check_executable(program, program);
  Error first_bad = error_of(ErrorKind::kNotFound, program + ": command not found");
  for (const std::string& dir : split(path.empty() ? "/usr/local/bin:/usr/bin:/bin" : path, ':')) {
    std::string cand = (dir.empty() ? "." : dir) + "/" + program;
    auto r = check_executable(cand, program);
    if (r) return r;
    if (r.error().kind == ErrorKind::kNotExecutable && first_bad.kind == ErrorKind::kNotFound) first_bad = r.error();
  }
  return first_bad;
}

// The kind of an exec that failed with errno `rc` (127 and 126 as a shell says them).
static ErrorKind exec_failure_kind(int rc) {
  if (rc == ENOENT) return ErrorKind::kNotFound;
  if (rc == EACCES || rc == ENOEXEC) return ErrorKind::kNotExecutable;
  return ErrorKind::kLaunchFailed;
}

static Error pipe_error() {
  std::string msg = std::string("pipe: ") + std::strerror(errno);
  if (errno == EMFILE) msg += " (each local worker needs 2 descriptors: raise 'ulimit -n')";
  return error_of(ErrorKind::kLaunchFailed, msg);
}

namespace {

// Everything the child needs, made before the fork: after it the child calls only
// async-signal-safe functions (hvdrun has threads).
struct ChildPlan {
  std::vector<char*> argv, envp;
  std::vector<int> defaults;  // signals back to their default action
  sigset_t none;
  const char* exe;
  int fds[3];          // its stdin, stdout, stderr
  int reg, status_fd;  // the watchdog's pipe (-1: none); exec's errno goes to status_fd
  bool bind;
  cpu_set_t cpus;  // its CPUs, when bind
  int nice;
};

ChildPlan child_plan(const SpawnRequest& req, int in_fd, int out_fd, int err_fd, int status_fd) {
  ChildPlan c;
  for (const auto& a : req.argv) c.argv.push_back(const_cast<char*>(a.c_str()));
  c.argv.push_back(nullptr);
  for (const auto& e : req.env) c.envp.push_back(const_cast<char*>(e.c_str()));
  c.envp.push_back(nullptr);
  c.defaults = handled_signals();
  c.defaults.push_back(SIGPIPE);
  sigemptyset(&c.none);
  c.exe = req.exe.c_str();
  c.fds[0] = in_fd;
  c.fds[1] = out_fd;
  c.fds[2] = err_fd;
  c.reg = req.register_fd;
  c.status_fd = status_fd;
  c.bind = !req.cpus.empty();
  c.nice = req.nice;
  CPU_ZERO(&c.cpus);
  for (int cpu : req.cpus)
    if (cpu >= 0 && cpu < CPU_SETSIZE) CPU_SET(cpu, &c.cpus);
  return c;
}

// The forked child: its own process group, registered with the watchdog, a clean signal
// state, its three descriptors, then exec (or exec's errno to the parent, and exit 127).
[[noreturn]] void run_child(const ChildPlan& c) {
  setpgid(0, 0);
  if (c.reg >= 0) {
    int32_t v = static_cast<int32_t>(getpid());
    while (write(c.reg, &v, sizeof v) < 0 && errno == EINTR) {
    }
  }
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int s : c.defaults) sigaction(s, &dfl, nullptr);
  sigprocmask(SIG_SETMASK, &c.none, nullptr);
  for (int target = 0; target < 3; ++target) {
    // dup2 onto itself keeps FD_CLOEXEC: clear it instead.
    if (c.fds[target] == target) fcntl(target, F_SETFD, 0);
    else dup2(c.fds[target], target);
  }
  if (c.bind) sched_setaffinity(0, sizeof c.cpus, &c.cpus);  // inherited by what it starts
  if (c.nice > 0) setpriority(PRIO_PROCESS, 0, c.nice);       // (one below ours is refused: ours stays)
  execve(c.exe, c.argv.data(), c.envp.data());
  int e = errno;
  if (c.reg >= 0) {
    // The group ends with this child, which the parent reaps at once: the watchdog forgets
    // it first, while its id is still ours (a reused one is never signalled).
    int32_t v = -static_cast<int32_t>(getpid());
    while (write(c.reg, &v, sizeof v) < 0 && errno == EINTR) {
    }
  }
  while (write(c.status_fd, &e, sizeof e) < 0 && errno == EINTR) {
  }
  _exit(127);
}

// A sanitizer's interceptors keep per-process state in memory that a child sharing ours
// would change: under one, the child is a plain fork.
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define HVDRUN_SPAWN_BY_FORK 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
#define HVDRUN_SPAWN_BY_FORK 1
#endif
#endif

#ifdef HVDRUN_SPAWN_BY_FORK
constexpr int kStatusPipeFlags = 0;
#else
constexpr int kStatusPipeFlags = O_NONBLOCK;  // the child has exec'd or failed when clone returns
#endif

int child_entry(void* plan) { run_child(*static_cast<const ChildPlan*>(plan)); }

// The child started as glibc's posix_spawn starts one: sharing our memory, on a stack of its
// own, while this thread waits for its exec or exit (CLONE_VM | CLONE_VFORK). A fork copied
// hvdrun's page tables for each worker, only for the exec to drop them: -np 32 took 1.4x
// the time of the posix_spawn hvdrun had before the child registered itself with the
// watchdog (which posix_spawn cannot do). Every signal is blocked around it: no handler
// of ours runs in the child before run_child has reset them.
pid_t start_child(const ChildPlan& plan) {
#ifdef HVDRUN_SPAWN_BY_FORK
  pid_t pid = fork();
  if (pid == 0) run_child(plan);
  return pid;
#else
  constexpr size_t kStack = 64 << 10;
  void* stack = mmap(nullptr, kStack, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
  if (stack == MAP_FAILED) return -1;
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pid_t pid = clone(child_entry, static_cast<char*>(stack) + kStack, CLONE_VM | CLONE_VFORK | SIGCHLD,
                    const_cast<ChildPlan*>(&plan));
  int clone_errno = errno;
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  munmap(stack, kStack);
  errno = clone_errno;
  return pid;
#endif
}

// The child's exec, as its status pipe says: nothing (it ran: the pipe closed at the exec;
// after a CLONE_VFORK child, read at once without waiting, as the child's exec has released
// us before it closes its copy of the pipe) or its errno (the child, reaped here, exited 127).
Status exec_outcome(const SpawnRequest& req, pid_t pid, const UniqueFd& status_r) {
  int child_errno = 0;
  ssize_t n;
  while ((n = ::read(status_r.get(), &child_errno, sizeof child_errno)) < 0 && errno == EINTR) {
  }
  if (n == static_cast<ssize_t>(sizeof child_errno)) {
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    int rc = child_errno;
    return make_sys_error(exec_failure_kind(rc), req.argv[0] + ": " + std::strerror(rc), rc);
  }
  return {};
}

}  // namespace

Result<SpawnedWorker> spawn_worker(const SpawnRequest& req) {
  int out[2], err[2], status[2];
  if (pipe2(out, O_CLOEXEC) != 0) return pipe_error();
  UniqueFd out_r(out[0]), out_w(out[1]);
  if (pipe2(err, O_CLOEXEC) != 0) return pipe_error();
  UniqueFd err_r(err[0]), err_w(err[1]);
  // The child's exec errno comes back through this one (closed by a successful exec).
  if (pipe2(status, O_CLOEXEC | kStatusPipeFlags) != 0) return pipe_error();
  UniqueFd status_r(status[0]), status_w(status[1]);
  UniqueFd devnull;
  int in_fd = req.stdin_fd;
  if (in_fd < 0) {
    devnull.reset(::open("/dev/null", O_RDONLY | O_CLOEXEC));
    if (!devnull.valid()) return error_of(ErrorKind::kLaunchFailed, std::string("/dev/null: ") + std::strerror(errno));
    in_fd = devnull.get();
  }
  const ChildPlan plan = child_plan(req, in_fd, out_w.get(), err_w.get(), status_w.get());

  pid_t pid = start_child(plan);
  if (pid < 0) return error_of(ErrorKind::kLaunchFailed, std::string("fork: ") + std::strerror(errno));
  setpgid(pid, pid);  // (also here: a kill(-pid) right after the return finds the group)
  status_w.reset();
  if (auto st = exec_outcome(req, pid, status_r); !st) return st.error();
  SpawnedWorker w;
  w.pid = pid;
  w.out = std::move(out_r);
  w.err = std::move(err_r);
  return w;
}

int exit_code_of(int wait_status) {
  return WIFSIGNALED(wait_status) ? 128 + WTERMSIG(wait_status) : WEXITSTATUS(wait_status);
}

Result<Captured> run_captured(const SpawnRequest& req, double timeout_s) {
  auto w = spawn_worker(req);
  if (!w) return w.error();
  return collect_captured(*w, timeout_s);
}

Captured collect_captured(SpawnedWorker& w, double timeout_s, int cancel_fd) {
  Captured c;
  std::string &out = c.out, &err = c.err;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  bool out_open = true, err_open = true;
  // Asked to cancel: what the helper has written is read first (it may have answered and
  // closed its output before the cancel, its output not read yet); cancelled only if its
  // output is still open once nothing more is there to read.
  bool cancelling = false;
  while ((out_open || err_open) && !c.timed_out && !c.cancelled) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      c.timed_out = true;
      break;
    }
    pollfd fds[3] = {{out_open ? w.out.get() : -1, POLLIN, 0}, {err_open ? w.err.get() : -1, POLLIN, 0},
                     {cancelling ? -1 : cancel_fd, POLLIN, 0}};
    int r = poll(fds, 3, cancelling ? 0 : static_cast<int>(left.count()));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) break;
    c.cancelled = cancelling && r == 0;
    char buf[4096];
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      ssize_t n = read(fds[i].fd, buf, sizeof buf);
      if (n > 0) {
        (i == 0 ? out : err).append(buf, static_cast<size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        (i == 0 ? out_open : err_open) = false;
      }
    }
    // (Its pipes still open: its group exists, whoever reaped the helper itself.)
    cancelling = cancelling || (cancel_fd >= 0 && (fds[2].revents & (POLLIN | POLLHUP | POLLERR)));
  }
  if (c.timed_out || c.cancelled) kill(-w.pid, SIGKILL);
  // Cancelled: not waited for. A helper at a low priority (SpawnRequest::nice) on a busy host
  // takes its time to die, and the caller is ending; the zombie goes with our own exit (or
  // to a subreaper's loop).
  if (c.cancelled) return c;
  int status = 0;
  // (A subreaper's event loop may have reaped it first: ECHILD, the status unknown.)
  while (waitpid(w.pid, &status, 0) < 0 && errno == EINTR) {
  }
  c.status = status;
  return c;
}

}  // namespace hvdrun
