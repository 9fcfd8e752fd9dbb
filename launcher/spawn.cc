#include "launcher/spawn.h"

#include <sys/wait.h>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
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
    if (r.error().code == 126 && first_bad.code == 127) first_bad = r.error();
  }
  return first_bad;
}

static Error pipe_error() {
  std::string msg = std::string("pipe: ") + std::strerror(errno);
  if (errno == EMFILE) msg += " (each local worker needs 2 descriptors: raise 'ulimit -n')";
  return error_of(ErrorKind::kLaunchFailed, msg);
}

Result<SpawnedWorker> spawn_worker(const SpawnRequest& req) {
  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) != 0) return pipe_error();
  UniqueFd out_r(out[0]), out_w(out[1]);
  if (pipe2(err, O_CLOEXEC) != 0) return pipe_error();
  UniqueFd err_r(err[0]), err_w(err[1]);

  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  if (req.stdin_fd >= 0)
    posix_spawn_file_actions_adddup2(&fa, req.stdin_fd, 0);
  else
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, out_w.get(), 1);
  posix_spawn_file_actions_adddup2(&fa, err_w.get(), 2);

  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, defaults;
  sigemptyset(&none);
  sigemptyset(&defaults);
  for (int s : handled_signals()) sigaddset(&defaults, s);
  sigaddset(&defaults, SIGPIPE);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);

  std::vector<char*> argv, envp;
  for (const auto& a : req.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const auto& e : req.env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);

  pid_t pid = -1;
  int rc = posix_spawn(&pid, req.exe.c_str(), &fa, &attr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  if (rc != 0)
    return make_error(req.argv[0] + ": " + std::strerror(rc), rc == ENOENT ? 127 : (rc == EACCES || rc == ENOEXEC) ? 126 : 3);
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
