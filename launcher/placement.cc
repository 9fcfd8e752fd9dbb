#include "launcher/placement.h"

#include <algorithm>
#include <map>
#include <sstream>
#include <tuple>

#include "common/strings.h"
#include "launcher/exit_status.h"

namespace hvdrun {
namespace {

const std::pair<const char*, BindTo> kNames[] = {{"auto", BindTo::kAuto},     {"none", BindTo::kNone},
                                                 {"core", BindTo::kCore},     {"socket", BindTo::kSocket},
                                                 {"package", BindTo::kSocket}, {"numa", BindTo::kNuma},
                                                 {"gpu", BindTo::kGpu}};

// The CPUs grouped by `key` (cores, packages, NUMA nodes), groups in key order.
template <class Key>
std::vector<std::pair<Key, std::vector<int>>> groups_by(const Topology& t, Key (*key)(const Cpu&)) {
  std::map<Key, std::vector<int>> m;
  for (const Cpu& c : t.cpus) m[key(c)].push_back(c.id);
  return {m.begin(), m.end()};
}

std::tuple<int, int, int> core_key(const Cpu& c) { return {c.node, c.package, c.core}; }
int package_key(const Cpu& c) { return c.package; }
int node_key(const Cpu& c) { return c.node; }

// Ranks spread evenly over the groups (socket, numa): rank i gets group i * groups / ranks.
template <class Key>
std::vector<RankPlacement> spread(const std::vector<std::pair<Key, std::vector<int>>>& groups, const char* name,
                                  int local_size) {
  std::vector<RankPlacement> out;
  for (int i = 0; i < local_size; ++i) {
    const auto& g = groups[static_cast<size_t>(i) * groups.size() / static_cast<size_t>(local_size)];
    out.push_back({g.second, std::string(name) + " " + std::to_string(g.first)});
  }
  return out;
}

Result<std::vector<RankPlacement>> by_core(const Topology& t, int local_size, bool asked) {
  auto cores = groups_by(t, core_key);
  if (static_cast<size_t>(local_size) > cores.size()) {
    if (!asked) return std::vector<RankPlacement>(static_cast<size_t>(local_size), {{}, "none (oversubscribed)"});
    return error_of(ErrorKind::kUsage, "--bind-to core: " + std::to_string(local_size) + " ranks on a host with " +
                                           std::to_string(cores.size()) + " cores; use --bind-to none (or socket)");
  }
  std::vector<RankPlacement> out;
  for (int i = 0; i < local_size; ++i) {
    const auto& c = cores[static_cast<size_t>(i)];
    out.push_back({c.second, "core " + std::to_string(std::get<2>(c.first)) + " (socket " +
                                 std::to_string(std::get<1>(c.first)) + ")"});
  }
  return out;
}

Result<std::vector<RankPlacement>> by_gpu(const Topology& t, int local_size) {
  if (t.gpus.empty()) return error_of(ErrorKind::kUsage, "--bind-to gpu: this host has no NVIDIA GPU in sysfs");
  auto nodes = groups_by(t, node_key);
  std::vector<RankPlacement> out;
  for (int i = 0; i < local_size; ++i) {
    const Gpu& g = t.gpus[static_cast<size_t>(i) % t.gpus.size()];
    RankPlacement p{{}, "none (GPU " + g.pci + " has no NUMA node)"};
    for (const auto& n : nodes)
      if (n.first == g.node) p = {n.second, "numa " + std::to_string(g.node) + " (GPU " + g.pci + ")"};
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace

std::vector<int> parse_cpu_list(const std::string& text) {
  std::vector<int> out;
  for (const std::string& part : split(text, ',')) {
    if (part.empty()) continue;
    size_t dash = part.find('-');
    char* end = nullptr;
    long lo = std::strtol(part.c_str(), &end, 10), hi = lo;
    if (end == part.c_str()) return {};
    if (dash != std::string::npos) hi = std::strtol(part.c_str() + dash + 1, &end, 10);
    if (*end || lo < 0 || hi < lo || hi >= 1 << 16) return {};
    for (long c = lo; c <= hi; ++c) out.push_back(static_cast<int>(c));
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::string cpu_list_text(const std::vector<int>& cpus) {
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    out += (out.empty() ? "" : ",") + std::to_string(cpus[i]);
    if (j > i) out += "-" + std::to_string(cpus[j]);
    i = j + 1;
  }
  return out;
}

Result<BindTo> parse_bind_to(const std::string& text, const std::string& what) {
  for (const auto& [name, b] : kNames)
    if (text == name) return b;
  return error_of(ErrorKind::kUsage, what + ": '" + text + "' is not one of auto, none, core, socket, numa, gpu");
}

const char* bind_to_name(BindTo b) {
  for (const auto& [name, v] : kNames)
    if (v == b) return name;
  return "auto";
}

namespace {

// "--bind-to=core -map-by slot" -> --bind-to, core, -map-by, slot.
std::vector<std::string> binding_words(const std::string& args) {
  std::istringstream in(args);
  std::vector<std::string> words;
  for (std::string w; in >> w;) {
    size_t eq = w.find('=');
    if (w[0] != '-' || eq == std::string::npos) {
      words.push_back(w);
      continue;
    }
    words.push_back(w.substr(0, eq));
    words.push_back(w.substr(eq + 1));
  }
  return words;
}

}  // namespace

Result<BindTo> bind_to_of_binding_args(const std::string& args) {
  std::vector<std::string> words = binding_words(args);
  BindTo b = BindTo::kAuto;
  for (size_t i = 0; i < words.size(); i += 2) {
    std::string flag = words[i], value = i + 1 < words.size() ? words[i + 1] : "";
    if (flag.rfind("--", 0) != 0) flag = "-" + flag;  // -bind-to as --bind-to
    value = value.substr(0, value.find(':'));          // "core:overload-allowed"
    if (flag == "--map-by" && (value == "slot" || value == "core" || value == "socket" || value == "numa"))
      continue;  // ranks are mapped in order on each host, as by slot
    if (flag != "--bind-to" || value.empty())
      return error_of(ErrorKind::kUsage, "--binding-args: '" + words[i] +
                                             "' is not supported (hvdrun acts on --bind-to "
                                             "none|core|socket|numa and --map-by slot|core|socket|numa)");
    auto parsed = parse_bind_to(value == "hwthread" ? "core" : value, "--binding-args --bind-to");
    if (!parsed) return parsed.error();
    b = *parsed;
  }
  return b;
}

Result<std::vector<RankPlacement>> place_ranks(const Topology& t, BindTo bind, int local_size) {
  if (local_size <= 0) return std::vector<RankPlacement>{};
  if (bind == BindTo::kAuto) {
    if (!t.gpus.empty() && static_cast<size_t>(local_size) <= t.gpus.size()) return by_gpu(t, local_size);
    return by_core(t, local_size, false);
  }
  if (bind == BindTo::kNone || t.cpus.empty())
    return std::vector<RankPlacement>(static_cast<size_t>(local_size), {{}, "none"});
  if (bind == BindTo::kCore) return by_core(t, local_size, true);
  if (bind == BindTo::kSocket) return spread(groups_by(t, package_key), "socket", local_size);
  if (bind == BindTo::kNuma) return spread(groups_by(t, node_key), "numa", local_size);
  return by_gpu(t, local_size);
}

}  // namespace hvdrun
