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
  auto run = run_captured(req, timeout_s);
  if (!run) return make_error(ErrorKind::kLaunchFailed,
                              "--horovod-compat: cannot run " + python + ": " + run.error().message);
  const std::string &out = run->out, &err = run->err;
  bool timed_out = run->timed_out;
  int status = run->status;
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
