#include "launcher/horovod_compat.h"

#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdlib>

#include "common/strings.h"
#include "launcher/spawn.h"

namespace hvdrun {
namespace {

std::string dirname_of(const std::string& p) {
  size_t slash = p.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : p.substr(0, slash);
}

std::string basename_of(const std::string& p) {
  size_t slash = p.rfind('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

std::string real_path(const std::string& p) {
  char buf[PATH_MAX];
  return realpath(p.c_str(), buf) ? std::string(buf) : p;
}

// Prints where `import horovod` would come from, or nothing; imports nothing itself.
constexpr const char* kProbe =
    "import importlib.util as u\n"
    "s = u.find_spec('horovod')\n"
    "print(s.origin or (list(s.submodule_search_locations or [''])[0]) if s else '')\n";

}  // namespace

std::string horovod_compat_dir_for(const std::string& self_exe) {
  return dirname_of(dirname_of(self_exe)) + "/share/hvdrun/horovod-compat";
}

std::string prepend_to_path(const std::string& dir, const std::string& path) {
  return path.empty() ? dir : dir + ":" + path;
}

std::string probe_python(const std::vector<std::string>& command) {
  if (!command.empty() && starts_with(basename_of(command[0]), "python")) return command[0];
  return "python3";
}

Status check_horovod_compat_dir(const std::string& dir) {
  struct stat st {};
  if (stat((dir + "/horovod/torch/__init__.py").c_str(), &st) != 0)
    return make_error(ErrorKind::kUsage, "--horovod-compat: hvdrun's horovod shim is not installed at " + dir +
                                             " (expected horovod/torch/__init__.py there; install hvdrun with cmake --install or pip)");
  return {};
}

Result<std::string> real_horovod_location(const std::string& python, const std::vector<std::string>& env,
                                          const std::string& shim_dir, double timeout_s) {
  std::string path;
  for (const auto& kv : env)
    if (starts_with(kv, "PATH=")) path = kv.substr(5);
  auto exe = resolve_program(python, path);
  if (!exe) return make_error(ErrorKind::kUsage,
                              "--horovod-compat: cannot run " + python + " to look for a real Horovod: " +
                                  exe.error().message);
  SpawnRequest req;
  req.exe = *exe;
  req.argv = {python, "-c", kProbe};
  req.env = env;
  auto w = spawn_worker(req);
  if (!w) return make_error(ErrorKind::kLaunchFailed,
                            "--horovod-compat: cannot run " + python + ": " + w.error().message);
  std::string out, err;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  bool out_open = true, err_open = true, timed_out = false;
  while (out_open || err_open) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    pollfd fds[2] = {{out_open ? w->out.get() : -1, POLLIN, 0}, {err_open ? w->err.get() : -1, POLLIN, 0}};
    int r = poll(fds, 2, static_cast<int>(left.count()));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) break;
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
  }
  if (timed_out) kill(-w->pid, SIGKILL);
  int status = 0;
  while (waitpid(w->pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out)
    return make_error(ErrorKind::kLaunchFailed, "--horovod-compat: " + python + " did not say within " +
                                                     std::to_string(int(timeout_s)) + " s whether a real Horovod is importable");
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return make_error(ErrorKind::kUsage,
                      "--horovod-compat: " + python + " failed while looking for a real Horovod: " + std::string(trim(err)));
  std::string where(trim(out));
  if (where.empty()) return std::string();
  // The shim itself, already on the PYTHONPATH, is not a real Horovod.
  if (starts_with(real_path(where), real_path(shim_dir) + "/")) return std::string();
  return where;
}

}  // namespace hvdrun
