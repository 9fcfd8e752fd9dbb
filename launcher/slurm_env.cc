#include "launcher/slurm_env.h"

#include <cctype>

#include "common/strings.h"

namespace hvdrun::slurm {
namespace {

Error bad(std::string_view list, const std::string& why) {
  return make_error(ErrorKind::kUsage, "Slurm host list '" + printable(list) + "': " + why);
}

bool all_digits(std::string_view s) {
  if (s.empty() || s.size() > 9) return false;
  for (char c : s)
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  return true;
}

// One bracket's contents, "1-2,5" or "01-02", into names' numbers (zero padded as written).
Result<std::vector<std::string>> expand_ranges(std::string_view inner, std::string_view list, size_t max_hosts) {
  std::vector<std::string> out;
  for (const auto& part : split(inner, ',')) {
    std::string_view p = part;
    size_t dash = p.find('-');
    std::string_view lo_s = p.substr(0, dash), hi_s = dash == std::string_view::npos ? lo_s : p.substr(dash + 1);
    if (!all_digits(lo_s) || !all_digits(hi_s))
      return bad(list, "'" + printable(p) + "' is not a number or a range N-M");
    long lo = std::stol(std::string(lo_s)), hi = std::stol(std::string(hi_s));
    if (lo > hi) return bad(list, "range '" + printable(p) + "' goes down");
    if (static_cast<size_t>(hi - lo) >= max_hosts || out.size() + static_cast<size_t>(hi - lo) >= max_hosts)
      return bad(list, "more than " + std::to_string(max_hosts) + " hosts");
    size_t width = lo_s.size();
    for (long v = lo; v <= hi; ++v) {
      std::string n = std::to_string(v);
      if (n.size() < width) n.insert(0, width - n.size(), '0');
      out.push_back(std::move(n));
    }
  }
  return out;
}

bool host_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
}

}  // namespace

Result<std::vector<std::string>> expand_hostlist(std::string_view list, size_t max_hosts) {
  std::vector<std::string> hosts;
  size_t i = 0;
  while (i < list.size()) {
    // One name: text and bracket groups up to a separator outside brackets.
    std::vector<std::string> names{""};
    bool any = false;
    while (i < list.size() && list[i] != ',' && !std::isspace(static_cast<unsigned char>(list[i]))) {
      char c = list[i];
      if (c == '[') {
        size_t close = list.find(']', i);
        if (close == std::string_view::npos) return bad(list, "'[' without ']'");
        std::string_view inner = list.substr(i + 1, close - i - 1);
        if (inner.find('[') != std::string_view::npos) return bad(list, "'[' inside brackets");
        auto nums = expand_ranges(inner, list, max_hosts);
        if (!nums) return nums.error();
        if (names.size() * nums->size() > max_hosts) return bad(list, "more than " + std::to_string(max_hosts) + " hosts");
        std::vector<std::string> next;
        next.reserve(names.size() * nums->size());
        for (const auto& n : names)
          for (const auto& v : *nums) next.push_back(n + v);  // leftmost bracket varies slowest
        names = std::move(next);
        i = close + 1;
      } else if (c == ']') {
        return bad(list, "']' without '['");
      } else if (host_char(c)) {
        for (auto& n : names) n.push_back(c);
        ++i;
      } else {
        return bad(list, std::string("unexpected character '") + (std::isprint(static_cast<unsigned char>(c)) ? std::string(1, c) : "\\x" + to_hex(&c, 1)) + "'");
      }
      any = true;
    }
    if (any) {
      if (hosts.size() + names.size() > max_hosts) return bad(list, "more than " + std::to_string(max_hosts) + " hosts");
      for (auto& n : names) hosts.push_back(std::move(n));
    }
    ++i;  // the separator
  }
  if (hosts.empty()) return bad(list, "no hosts");
  return hosts;
}

Result<std::vector<int>> parse_tasks_per_node(std::string_view s) {
  std::vector<int> out;
  auto fail = [&] {
    return make_error(ErrorKind::kUsage, "SLURM_TASKS_PER_NODE '" + printable(s) + "': expected counts like '2(x3),1'");
  };
  if (s.empty()) return fail();
  for (const auto& part : split(s, ',')) {
    std::string_view p = part;
    std::string_view count = p, times = "1";
    if (size_t paren = p.find('('); paren != std::string_view::npos) {
      if (p.size() < paren + 4 || p.substr(paren, 2) != "(x" || p.back() != ')') return fail();
      count = p.substr(0, paren);
      times = p.substr(paren + 2, p.size() - paren - 3);
    }
    if (!all_digits(count) || !all_digits(times)) return fail();
    long c = std::stol(std::string(count)), t = std::stol(std::string(times));
    if (c > kMaxSlotsPerHost)
      return make_error(ErrorKind::kUsage, "SLURM_TASKS_PER_NODE '" + printable(s) + "': " + std::string(count) +
                                               " tasks on one node; at most " + std::to_string(kMaxSlotsPerHost));
    if (c < 1 || t < 1 || out.size() + static_cast<size_t>(t) > (1u << 20)) return fail();
    out.insert(out.end(), static_cast<size_t>(t), static_cast<int>(c));
  }
  return out;
}

Result<std::vector<HostSlots>> allocation_hosts(const std::map<std::string, std::string>& env) {
  auto get = [&](const std::string& name) {
    auto it = env.find(name);
    return it == env.end() ? std::string() : it->second;
  };
  std::string var = "SLURM_JOB_NODELIST", list = get("SLURM_JOB_NODELIST");
  if (list.empty()) list = get(var = "SLURM_NODELIST");
  if (list.empty())
    return make_error(ErrorKind::kUsage, "inside a Slurm allocation (SLURM_JOB_ID " + printable(get("SLURM_JOB_ID")) +
                          ") but SLURM_JOB_NODELIST is not set; give the hosts with -H");
  auto names = expand_hostlist(list);
  if (!names) return make_error(ErrorKind::kUsage, var + ": " + names.error().message);
  std::vector<int> slots(names->size(), 1);
  // Inside a step (srun ... hvdrun), SLURM_TASKS_PER_NODE and SLURM_NTASKS are the step's,
  // not the allocation's: refuse rather than plan from the wrong layout.
  if (std::string step = get("SLURM_STEP_ID"); !step.empty())
    return make_error(ErrorKind::kUsage, "hvdrun runs inside Slurm step " + printable(get("SLURM_JOB_ID")) + "." + printable(step) +
                          ", whose SLURM_TASKS_PER_NODE describes that step, not the allocation; run hvdrun "
                          "directly under salloc or in the sbatch script (not through srun), or give the hosts with -H");
  if (std::string tpn = get("SLURM_TASKS_PER_NODE"); !tpn.empty()) {
    auto t = parse_tasks_per_node(tpn);
    if (!t) return t.error();
    if (t->size() != names->size())
      return make_error(ErrorKind::kUsage, "SLURM_TASKS_PER_NODE '" + printable(tpn) + "' gives " + std::to_string(t->size()) + " node(s), " + var +
                            " '" + printable(list) + "' names " + std::to_string(names->size()));
    slots = *t;
  }
  std::vector<HostSlots> hosts;
  for (size_t i = 0; i < names->size(); ++i) add_host(hosts, (*names)[i], slots[i]);
  return hosts;
}

Result<int> allocation_ntasks(const std::map<std::string, std::string>& env) {
  for (const char* name : {"SLURM_NTASKS", "SLURM_NPROCS"}) {
    auto it = env.find(name);
    if (it == env.end() || it->second.empty()) continue;
    auto n = parse_int(it->second, name, 1, 1 << 24);
    if (!n) return n.error();
    return static_cast<int>(*n);
  }
  return 0;
}

}  // namespace hvdrun::slurm
