#include "launcher/spawn.h"

#include <sys/wait.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
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

Result<SpawnedWorker> spawn_worker(const SpawnRequest& req) {
  int out[2], err[2], status[2];
  if (pipe2(out, O_CLOEXEC) != 0) return pipe_error();
  UniqueFd out_r(out[0]), out_w(out[1]);
  if (pipe2(err, O_CLOEXEC) != 0) return pipe_error();
  UniqueFd err_r(err[0]), err_w(err[1]);
  // The child's exec errno comes back through this one (closed by a successful exec).
  if (pipe2(status, O_CLOEXEC) != 0) return pipe_error();
  UniqueFd status_r(status[0]), status_w(status[1]);
  UniqueFd devnull;
  int in_fd = req.stdin_fd;
  if (in_fd < 0) {
    devnull.reset(::open("/dev/null", O_RDONLY | O_CLOEXEC));
    if (!devnull.valid()) return error_of(ErrorKind::kLaunchFailed, std::string("/dev/null: ") + std::strerror(errno));
    in_fd = devnull.get();
  }

  // Everything the child needs is made here: after fork it calls only async-signal-safe
  // functions (hvdrun has threads).
  std::vector<char*> argv, envp;
  for (const auto& a : req.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const auto& e : req.env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  std::vector<int> defaults = handled_signals();
  defaults.push_back(SIGPIPE);
  sigset_t none;
  sigemptyset(&none);
  const char* exe = req.exe.c_str();
  int fds[3] = {in_fd, out_w.get(), err_w.get()};
  int reg = req.register_fd, status_fd = status_w.get();

  pid_t pid = fork();
  if (pid < 0) return error_of(ErrorKind::kLaunchFailed, std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    setpgid(0, 0);
    if (reg >= 0) {
      int32_t v = static_cast<int32_t>(getpid());
      while (write(reg, &v, sizeof v) < 0 && errno == EINTR) {
      }
    }
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    for (int s : defaults) sigaction(s, &dfl, nullptr);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    for (int target = 0; target < 3; ++target) {
      // dup2 onto itself keeps FD_CLOEXEC: clear it instead.
      if (fds[target] == target) fcntl(target, F_SETFD, 0);
      else dup2(fds[target], target);
    }
    execve(exe, argv.data(), envp.data());
    int e = errno;
    while (write(status_fd, &e, sizeof e) < 0 && errno == EINTR) {
    }
    _exit(127);
  }
  setpgid(pid, pid);  // (also here: a kill(-pid) right after the return finds the group)
  status_w.reset();
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
  SpawnedWorker w;
  w.pid = pid;
  w.out = std::move(out_r);
  w.err = std::move(err_r);
  return w;
}

int exit_code_of(int wait_status) {
  return WIFSIGNALED(wait_status) ? 128 + WTERMSIG(wait_status) : WEXITSTATUS(wait_status);
}

}  // namespace hvdrun
