#include "launcher/preflight.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "common/strings.h"
#include "launcher/budget.h"

namespace hvdrun {
namespace {

constexpr double kClockSkew = 1.0;          // seconds off hvdrun's clock before a warning
constexpr long long kShmBase = 64ll << 20;  // /dev/shm a host with several ranks wants at least
constexpr long long kShmPerPair = 2ll << 20;  // and per pair of its ranks (a ring each way)

std::string join(const std::vector<std::string>& v, const std::string& sep) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : sep) + s;
  return out;
}

std::vector<std::string> names_of(const std::vector<IfaceFacts>& ifaces) {
  std::vector<std::string> n;
  for (const auto& i : ifaces) n.push_back(i.name);
  return n;
}

std::string addr_of(const std::vector<InterfaceAddress>& addrs, const std::string& iface) {
  for (const auto& a : addrs)
    if (a.iface == iface && !a.v6) return a.addr;
  for (const auto& a : addrs)
    if (a.iface == iface) return a.addr;
  return "";
}

// What is wrong with `named` on `h` ("" when nothing): NCCL needs one usable interface of
// those it names; Gloo and hvdrun each one they name.
std::string iface_problem(const NamedIface& named, const PreflightHost& h) {
  auto found = matching_ifaces(named, h.facts.ifaces);
  std::string what = named.origin + (named.origin[0] == '-' ? " " : "=") + named.value;
  auto usable = [&h](const std::string& n) {
    auto it = std::find_if(h.facts.ifaces.begin(), h.facts.ifaces.end(), [&n](const IfaceFacts& i) { return i.name == n; });
    return it != h.facts.ifaces.end() && it->up && !addr_of(h.addrs, n).empty();
  };
  auto state = [&](const std::string& n) {
    auto it = std::find_if(h.facts.ifaces.begin(), h.facts.ifaces.end(), [&n](const IfaceFacts& i) { return i.name == n; });
    return !it->up ? n + " is down" : n + " has no address";
  };
  if (named.origin == "NCCL_SOCKET_IFNAME") {
    if (found.empty()) return what + ": no such interface here (it has " + join(names_of(h.facts.ifaces), ", ") + ")";
    if (std::none_of(found.begin(), found.end(), usable)) return what + ": " + state(found.front());
    return "";
  }
  for (const auto& want : split(named.value, ',')) {
    if (want.empty()) continue;
    if (std::find(found.begin(), found.end(), want) == found.end())
      return what + ": no interface " + want + " here (it has " + join(names_of(h.facts.ifaces), ", ") + ")";
    if (!usable(want)) return what + ": " + state(want);
  }
  return "";
}

struct Checker {
  const PreflightJob& job;
  std::vector<PreflightFinding> out;
  void add(const PreflightHost& h, Finding s, const char* column, std::string text) {
    out.push_back({h.host, s, column, std::move(text)});
  }
  void hvdrun(const PreflightHost& h) {
    const HostFacts& f = h.facts;
    if (f.protocol != job.protocol)
      add(h, Finding::kError, "hvdrun",
          "hvdrun " + f.version + " speaks agent protocol " + std::to_string(f.protocol) + ", this hvdrun " +
              job.version + " protocol " + std::to_string(job.protocol) + ": they cannot talk; install the same version");
    else if (f.version != job.version)
      add(h, Finding::kWarning, "hvdrun", "hvdrun " + f.version + ", this one " + job.version + " (same protocol)");
  }
  void build(const PreflightHost& h, const PreflightHost& first) {
    if (h.facts.build != first.facts.build)
      add(h, Finding::kWarning, "build", "hvdrun built with " + h.facts.build + ", on " + first.host + " with " + first.facts.build);
  }
  void gpus(const PreflightHost& h, const PreflightHost& first) {
    const HostFacts& f = h.facts;
    if (!f.gpus.empty() && static_cast<int>(f.gpus.size()) < h.slots)
      add(h, Finding::kWarning, "gpus", std::to_string(f.gpus.size()) + " GPU(s) for " + std::to_string(h.slots) + " ranks");
    if (f.gpus.empty() || first.facts.gpus.empty()) return;
    if (f.gpus.front().model != first.facts.gpus.front().model)
      add(h, Finding::kWarning, "gpus", "GPU " + f.gpus.front().model + ", on " + first.host + " " + first.facts.gpus.front().model);
    if (f.gpu_driver != first.facts.gpu_driver)
      add(h, Finding::kWarning, "gpus", "NVIDIA driver " + f.gpu_driver + ", on " + first.host + " " + first.facts.gpu_driver);
  }
  void ifaces(const PreflightHost& h) {
    for (const auto& named : job.ifaces)
      if (auto p = iface_problem(named, h); !p.empty()) add(h, Finding::kError, "ifaces", p);
  }
  void limits(const PreflightHost& h) {
    BudgetNeed need;
    need.local_ranks = h.slots;
    long long files = files_needed(need), tasks = tasks_needed(need);
    if (h.facts.nofile >= 0 && h.facts.nofile < files)
      add(h, Finding::kError, "limits", "RLIMIT_NOFILE " + std::to_string(h.facts.nofile) + " (hard) is under the " +
                                            std::to_string(files) + " descriptors its " + std::to_string(h.slots) + " ranks need");
    if (h.facts.nproc >= 0 && h.facts.nproc < tasks)
      add(h, Finding::kError, "limits", "RLIMIT_NPROC " + std::to_string(h.facts.nproc) + " is under the " +
                                            std::to_string(tasks) + " processes its " + std::to_string(h.slots) + " ranks need");
  }
  void shm(const PreflightHost& h) {
    if (h.slots < 2) return;
    long long want = kShmBase + kShmPerPair * h.slots * (h.slots - 1);
    if (h.facts.shm_free < 0)
      add(h, Finding::kWarning, "shm", "no /dev/shm: its ranks talk over TCP, NCCL fails");
    else if (h.facts.shm_free < want)
      add(h, Finding::kWarning, "shm", "/dev/shm has " + std::to_string(h.facts.shm_free >> 20) + " MiB free, " +
                                           std::to_string(h.slots) + " ranks want " + std::to_string(want >> 20) + " MiB");
  }
  void clock(const PreflightHost& h) {
    if (std::fabs(h.clock_offset) > kClockSkew) {
      char buf[96];
      std::snprintf(buf, sizeof buf, "clock %+.1f s off hvdrun's (timelines and logs will not line up)", h.clock_offset);
      add(h, Finding::kWarning, "clock", buf);
    }
  }
  void python(const PreflightHost& h, const PreflightHost* first) {
    if (!h.has_python) return;
    if (!h.python.error.empty()) return add(h, Finding::kWarning, "python", "cannot tell its Python: " + h.python.error);
    if (!first || first == &h) return;
    auto text = [](const PythonFacts& p) {
      return "Python " + p.python + ", " + (p.torch.empty() ? "no torch" : "torch " + p.torch) +
             (p.torch.empty() ? "" : p.torch_cuda.empty() ? " (CPU)" : " (CUDA " + p.torch_cuda + ")");
    };
    if (text(h.python) != text(first->python))
      add(h, Finding::kWarning, "python", text(h.python) + "; on " + first->host + " " + text(first->python));
  }
};

}  // namespace

std::vector<std::string> matching_ifaces(const NamedIface& named, const std::vector<IfaceFacts>& ifaces) {
  std::string v = named.value;
  bool nccl = named.origin == "NCCL_SOCKET_IFNAME";
  bool exclude = nccl && !v.empty() && v[0] == '^', exact = !nccl || (!v.empty() && v[0] == '=');
  if (nccl && (exclude || (!v.empty() && v[0] == '='))) v = v.substr(1);
  auto wanted = split(v, ',');
  std::vector<std::string> out;
  for (const auto& i : ifaces) {
    bool named_here = std::any_of(wanted.begin(), wanted.end(), [&](const std::string& w) {
      return !w.empty() && (exact ? i.name == w : starts_with(i.name, w));
    });
    if (exclude ? (!named_here && i.name != "lo") : named_here) out.push_back(i.name);
  }
  return out;
}

std::vector<PreflightFinding> check_preflight(const std::vector<PreflightHost>& hosts, const PreflightJob& job) {
  Checker c{job, {}};
  const PreflightHost* first_python = nullptr;
  for (const auto& h : hosts)
    if (h.has_python && h.python.error.empty()) {
      first_python = &h;
      break;
    }
  for (const auto& h : hosts) {
    c.hvdrun(h);
    c.build(h, hosts.front());
    c.gpus(h, hosts.front());
    c.ifaces(h);
    c.python(h, first_python);
    c.shm(h);
    c.limits(h);
    c.clock(h);
  }
  return c.out;
}

bool preflight_passes(const std::vector<PreflightFinding>& findings) {
  return std::none_of(findings.begin(), findings.end(), [](const PreflightFinding& f) { return f.severity == Finding::kError; });
}

std::vector<std::string> preflight_lines(const std::vector<PreflightFinding>& findings, Finding severity) {
  std::vector<std::string> hosts;
  std::map<std::string, std::vector<std::string>> texts;
  for (const auto& f : findings) {
    if (f.severity != severity) continue;
    if (!texts.count(f.host)) hosts.push_back(f.host);
    texts[f.host].push_back(f.text);
  }
  std::vector<std::string> lines;
  for (const auto& h : hosts) lines.push_back(h + ": " + join(texts[h], "; "));
  return lines;
}

}  // namespace hvdrun
