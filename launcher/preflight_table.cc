// preflight_table(): the pre-flight check as one table, a row per host (preflight.h).
#include <algorithm>
#include <cstdio>

#include "launcher/preflight.h"

namespace hvdrun {
namespace {

const char* const kColumns[] = {"host", "ranks", "hvdrun", "build", "gpus", "ifaces", "python", "shm", "limits", "clock"};

std::string size_text(long long bytes) {
  if (bytes < 0) return "none";
  char buf[32];
  if (bytes >= (1ll << 30)) std::snprintf(buf, sizeof buf, "%.1fG", static_cast<double>(bytes) / (1ll << 30));
  else std::snprintf(buf, sizeof buf, "%lldM", bytes >> 20);
  return buf;
}

std::string gpus_cell(const HostFacts& f) {
  if (f.gpus.empty()) return "-";
  std::string numa;
  for (const auto& g : f.gpus) {
    std::string n = g.numa_node < 0 ? "?" : std::to_string(g.numa_node);
    numa += (numa.empty() ? "" : ",") + n;
  }
  return std::to_string(f.gpus.size()) + "x " + f.gpus.front().model + " drv " + f.gpu_driver + " numa " + numa;
}

std::string ifaces_cell(const PreflightHost& h, const PreflightJob& job) {
  std::string out;
  for (const auto& named : job.ifaces) {
    auto found = matching_ifaces(named, h.facts.ifaces);
    if (found.empty()) out += (out.empty() ? "" : " ") + named.value + ":missing";
    for (const auto& n : found) {
      auto it = std::find_if(h.facts.ifaces.begin(), h.facts.ifaces.end(), [&n](const IfaceFacts& i) { return i.name == n; });
      std::string addr;
      for (const auto& a : h.addrs)
        if (a.iface == n && addr.empty()) addr = a.addr;
      out += (out.empty() ? "" : " ") + n + ":" + (it->up ? "up" : "down") + (addr.empty() ? "" : ":" + addr);
    }
  }
  return out.empty() ? "-" : out;
}

std::string python_cell(const PreflightHost& h) {
  if (!h.has_python) return "-";
  const PythonFacts& p = h.python;
  if (!p.error.empty()) return "?";
  if (p.torch.empty()) return p.python + " no-torch";
  return p.python + " torch-" + p.torch + (p.torch_cuda.empty() ? "-cpu" : "-cu" + p.torch_cuda);
}

std::vector<std::string> row_of(const PreflightHost& h, const PreflightJob& job) {
  auto lim = [](long long v) { return v < 0 ? std::string("unl") : std::to_string(v); };
  char clock[32];
  std::snprintf(clock, sizeof clock, "%+.3fs", h.clock_offset);
  return {h.host, std::to_string(h.slots), h.facts.version, h.facts.build, gpus_cell(h.facts), ifaces_cell(h, job),
          python_cell(h), size_text(h.facts.shm_free), "nofile " + lim(h.facts.nofile) + " nproc " + lim(h.facts.nproc),
          clock};
}

// '!' on a cell with an error, else '*' with a warning.
void mark(std::vector<std::string>& row, const std::string& host, const std::vector<PreflightFinding>& findings,
          bool& any) {
  for (size_t c = 0; c < row.size(); ++c) {
    char m = 0;
    for (const auto& f : findings)
      if (f.host == host && f.column == kColumns[c]) m = f.severity == Finding::kError ? '!' : (m ? m : '*');
    if (m) {
      row[c] += m;
      any = true;
    }
  }
}

}  // namespace

std::string preflight_table(const std::vector<PreflightHost>& hosts, const PreflightJob& job,
                            const std::vector<PreflightFinding>& findings) {
  std::vector<std::vector<std::string>> rows{std::vector<std::string>(std::begin(kColumns), std::end(kColumns))};
  bool any = false;
  for (const auto& h : hosts) {
    rows.push_back(row_of(h, job));
    mark(rows.back(), h.host, findings, any);
  }
  std::vector<size_t> width(rows[0].size(), 0);
  for (const auto& r : rows)
    for (size_t c = 0; c < r.size(); ++c) width[c] = std::max(width[c], r[c].size());
  std::string out;
  for (const auto& r : rows) {
    std::string line;
    for (size_t c = 0; c < r.size(); ++c) line += r[c] + std::string(c + 1 < r.size() ? width[c] - r[c].size() + 2 : 0, ' ');
    out += line + "\n";
  }
  if (any) out += "(! an error: the job cannot run so; * a difference to look at)\n";
  return out;
}

}  // namespace hvdrun
