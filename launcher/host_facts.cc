#include "launcher/host_facts.h"

#include <dirent.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "common/strings.h"
#include "hvdrun_version.h"
#include "launcher/agent_wire.h"
#include "launcher/exit_status.h"
#include "launcher/horovod_compat.h"
#include "launcher/spawn.h"
#include "launcher/sys_files.h"

namespace hvdrun {
namespace {

std::string read_text(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// "Key:   value" of /proc/driver/nvidia/gpus/*/information.
std::string info_field(const std::string& text, const std::string& key) {
  for (const auto& line : split(text, '\n')) {
    auto colon = line.find(':');
    if (colon != std::string::npos && trim(std::string_view(line).substr(0, colon)) == key)
      return std::string(trim(std::string_view(line).substr(colon + 1)));
  }
  return "";
}

// "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug ...": the first word
// that is a dotted number.
std::string driver_version(const std::string& text) {
  std::istringstream words(text.substr(0, text.find('\n')));
  for (std::string w; words >> w;)
    if (std::isdigit(static_cast<unsigned char>(w[0])) && w.find('.') != std::string::npos) return w;
  return "";
}

std::vector<GpuFacts> gpus_under(const std::string& root) {
  std::vector<GpuFacts> gpus;
  for (const auto& dir : dir_entries(root + "/proc/driver/nvidia/gpus")) {
    std::string info = read_text(root + "/proc/driver/nvidia/gpus/" + dir + "/information");
    GpuFacts g;
    g.model = info_field(info, "Model");
    g.bus = info_field(info, "Bus Location");
    if (g.bus.empty()) g.bus = dir;
    for (auto& c : g.bus) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    auto numa = parse_int(std::string(trim(read_text(root + "/sys/bus/pci/devices/" + g.bus + "/numa_node"))), "numa_node",
                          -1, 1 << 20);
    g.numa_node = numa ? static_cast<int>(*numa) : -1;
    gpus.push_back(std::move(g));
  }
  return gpus;
}

std::vector<IfaceFacts> ifaces_under(const std::string& root) {
  std::vector<IfaceFacts> out;
  for (const auto& name : dir_entries(root + "/sys/class/net")) {
    std::string base = root + "/sys/class/net/" + name + "/";
    unsigned long flags = std::strtoul(std::string(trim(read_text(base + "flags"))).c_str(), nullptr, 16);
    bool oper_down = trim(read_text(base + "operstate")) == "down";
    out.push_back({name, (flags & 0x1) != 0 && !oper_down});
  }
  return out;
}

long long limit_of(int resource, bool hard) {
  rlimit rl{};
  if (getrlimit(resource, &rl) != 0) return -1;
  rlim_t v = hard ? rl.rlim_max : rl.rlim_cur;
  return v == RLIM_INFINITY ? -1 : static_cast<long long>(v);
}

// Prints the Python's version, then torch's version and CUDA build (empty lines when there
// is none), reading torch/version.py rather than importing torch (seconds).
constexpr const char* kPythonProbe =
    "import sys, re, importlib.util as u\n"
    "print('%d.%d.%d' % sys.version_info[:3])\n"
    "s = u.find_spec('torch')\n"
    "t = c = ''\n"
    "for d in (list(s.submodule_search_locations or []) if s else [])[:1]:\n"
    "  v = open(d + '/version.py').read()\n"
    "  m = re.search(r\"__version__\\s*=\\s*'([^']*)'\", v); t = m.group(1) if m else ''\n"
    "  m = re.search(r\"^cuda\\s*(?::[^=]*)?=\\s*'([^']*)'\", v, re.M); c = m.group(1) if m else ''\n"
    "print(t)\nprint(c)\n";

}  // namespace

std::string build_facts() {
  std::string b = "tcp shm";
  std::string backend = HVDRUN_GPU_BACKEND_NAME;
  std::string cuda = HVDRUN_CUDA_VERSION, nccl = HVDRUN_NCCL_VERSION;
  if (backend != "none") b += " cuda" + (cuda.empty() ? "" : "-" + cuda);
  if (backend == "nccl") b += " nccl" + (nccl.empty() ? "" : "-" + nccl);
  return b;
}

HostFacts collect_host_facts(const std::string& root) {
  HostFacts f;
  f.version = HVDRUN_VERSION_STRING;
  f.protocol = agentwire::kProtocol;
  f.build = build_facts();
  f.gpu_driver = driver_version(read_text(root + "/proc/driver/nvidia/version"));
  f.gpus = gpus_under(root);
  f.ifaces = ifaces_under(root);
  struct statvfs sv {};
  if (statvfs((root + "/dev/shm").c_str(), &sv) == 0)
    f.shm_free = static_cast<long long>(sv.f_bavail) * static_cast<long long>(sv.f_frsize);
  f.nofile = limit_of(RLIMIT_NOFILE, true);
  f.nproc = limit_of(RLIMIT_NPROC, false);
  f.clock = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  return f;
}

bool runs_python(const std::vector<std::string>& command) {
  return !command.empty() && probe_python(command) == command[0];
}

namespace {

Result<SpawnedWorker> spawn_python_probe(const std::string& python, const std::vector<std::string>& env, int nice) {
  std::string path;
  for (const auto& kv : env)
    if (starts_with(kv, "PATH=")) path = kv.substr(5);
  auto exe = resolve_program(python, path);
  if (!exe) return exe.error();
  SpawnRequest req;
  req.exe = *exe;
  req.argv = {python, "-c", kPythonProbe};
  req.env = env;
  req.nice = nice;
  auto w = spawn_worker(req);
  if (!w) return error_of(w.error().kind, "cannot run " + python + ": " + w.error().message);
  return w;
}

PythonFacts python_facts_of(const Captured& run, const std::string& python, double timeout_s) {
  if (run.timed_out) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", timeout_s);
    return {"", "", "", python + " did not answer within " + buf + " s"};
  }
  auto lines = split(run.out, '\n');
  if (!WIFEXITED(run.status) || WEXITSTATUS(run.status) != 0 || lines.size() < 3) {
    auto err = split(std::string(trim(run.err)), '\n');
    return {"", "", "", python + " failed" + (err.empty() || err.back().empty() ? "" : ": " + err.back())};
  }
  return {lines[0], lines[1], lines[2], ""};
}

}  // namespace

PythonFacts probe_python_facts(const std::string& python, const std::vector<std::string>& env, double timeout_s) {
  auto w = spawn_python_probe(python, env, 0);
  if (!w) return {"", "", "", w.error().message};
  return python_facts_of(collect_captured(*w, timeout_s), python, timeout_s);
}

PythonProbe::PythonProbe(const std::string& python, const std::vector<std::string>& env, double timeout_s,
                         std::function<void(const PythonFacts&)> done) {
  int p[2];
  if (pipe2(p, O_CLOEXEC) == 0) {
    cancel_rd_.reset(p[0]);
    cancel_wr_.reset(p[1]);
  }
  // At the lowest priority: the ranks that start meanwhile go first (on a busy 2-core
  // host, 8 probes beside 16 `python3 -c pass` ranks made the launch 1.18x as long), and a
  // probe that got no CPU before the job's end is simply ended with it.
  auto spawned = spawn_python_probe(python, env, 19);
  thread_ = std::thread([this, w = std::move(spawned), python, timeout_s, done = std::move(done)]() mutable {
    if (!w) return done({"", "", "", w.error().message});
    Captured run = collect_captured(*w, timeout_s, cancel_rd_.get());
    if (!run.cancelled) done(python_facts_of(run, python, timeout_s));
  });
}

void PythonProbe::stop() {
  if (!thread_.joinable()) return;
  char c = 1;
  [[maybe_unused]] ssize_t n = ::write(cancel_wr_.get(), &c, 1);
  thread_.join();
}

}  // namespace hvdrun
