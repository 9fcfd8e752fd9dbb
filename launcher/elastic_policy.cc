#include "launcher/elastic_policy.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "common/strings.h"
#include "launcher/exit_status.h"

namespace hvdrun {
namespace {

// One line, "host", "host:N", "[v6]" or "[v6]:N" (a bare IPv6 address is a host):
// the host and its slot text ("" for none); nullopt when malformed.
std::optional<std::pair<std::string, std::string>> split_line(std::string_view line) {
  if (line.front() == '[') {
    size_t close = line.find(']');
    if (close == std::string_view::npos) return std::nullopt;
    std::string_view rest = line.substr(close + 1);
    if (!rest.empty() && rest.front() != ':') return std::nullopt;
    return std::make_pair(std::string(line.substr(1, close - 1)), std::string(rest.empty() ? "" : rest.substr(1)));
  }
  size_t colon = line.find(':');
  if (colon == std::string_view::npos || line.find(':', colon + 1) != std::string_view::npos)
    return std::make_pair(std::string(line), std::string());
  return std::make_pair(std::string(line.substr(0, colon)), std::string(line.substr(colon + 1)));
}

std::string seconds(double s) {
  char b[32];
  std::snprintf(b, sizeof b, "%g", s);
  return b;
}

}  // namespace

Result<std::vector<HostSlots>> parse_discovery_output(std::string_view out, int bare_slots, const std::string& script) {
  std::vector<HostSlots> hosts;
  size_t number = 0;
  for (const auto& raw : split(out, '\n')) {
    ++number;
    std::string_view line = trim(raw);  // spaces, tabs and a CR
    if (line.empty()) continue;
    auto bad = [&](const std::string& why) {
      return error_of(ErrorKind::kUsage, "--host-discovery-script '" + printable(script) + "': line " +
                                             std::to_string(number) + " '" + printable(line, 80) + "': " + why);
    };
    auto parts = split_line(line);
    if (!parts) return bad("expected host[:slots]");
    if (std::string e = check_host_name(parts->first); !e.empty()) return bad(e);
    int slots = bare_slots;
    if (!parts->second.empty() || line.back() == ':') {
      auto n = parse_int(parts->second, "slots", 1, kMaxSlotsPerHost);
      if (!n) return bad("expected host[:slots] with slots from 1 to " + std::to_string(kMaxSlotsPerHost));
      slots = static_cast<int>(*n);
    }
    for (const auto& h : hosts)
      if (h.host == parts->first) return bad("host '" + printable(h.host) + "' listed twice");
    hosts.push_back({parts->first, slots});
  }
  return hosts;
}

DiscoveryVerdict judge_discovery(const DiscoveryRun& run, bool first, const std::string& script, double timeout) {
  DiscoveryVerdict v;
  std::string name = "--host-discovery-script '" + printable(script) + "'";
  if (run.timed_out)
    v.message = name + ": still running after " + seconds(timeout) + " s (HVDRUN_DISCOVERY_TIMEOUT): killed";
  else if (run.exit_code != 0)
    v.message = name + ": exited with status " + std::to_string(run.exit_code);
  else if (!run.parse_error.empty())
    v.message = run.parse_error;
  v.use = v.message.empty();
  v.fatal = !v.use && first;
  if (!v.use && !first) v.message += "; the hosts it listed last stand";
  return v;
}

std::optional<double> HostBlacklist::add(const std::string& host, double now, double u) {
  State& s = hosts_[host];
  if (!cooldown_) {
    s.count++;
    return std::nullopt;
  }
  auto [lo, hi] = *cooldown_;
  if (s.until > now) return s.until - now;  // within its cooldown: not counted twice
  s.count++;
  double delay = lo * std::ldexp(1.0, std::min(s.count, 30)) + u * lo;
  delay = std::max<double>(lo, std::min<double>(hi, delay));
  s.until = now + delay;
  return delay;
}

bool HostBlacklist::blocked(const std::string& host, double now) const {
  auto it = hosts_.find(host);
  if (it == hosts_.end() || it->second.count == 0) return false;
  return !cooldown_ || it->second.until > now;
}

std::vector<HostSlots> HostBlacklist::usable(const std::vector<HostSlots>& hosts, double now) const {
  std::vector<HostSlots> out;
  for (const auto& h : hosts)
    if (!blocked(h.host, now)) out.push_back(h);
  return out;
}

int HostBlacklist::count(const std::string& host) const {
  auto it = hosts_.find(host);
  return it == hosts_.end() ? 0 : it->second.count;
}

std::vector<HostSlots> round_hosts(const std::vector<HostSlots>& hosts, const HostBlacklist& blacklist, double now,
                                   const std::set<std::string>& opening) {
  std::vector<HostSlots> out;
  for (const auto& h : blacklist.usable(hosts, now))
    if (!opening.count(h.host)) out.push_back(h);
  return out;
}

namespace {

struct Counts {
  int running = 0, succeeded = 0, failed = 0, all = 0;
  int earlier = 0;     // of succeeded: kSucceededEarlier
  int registered = 0;  // of running: kRegistered
};

bool succeeded(WorkerEnd e) { return e == WorkerEnd::kSucceeded || e == WorkerEnd::kSucceededEarlier; }

Counts count_ends(const std::map<std::string, std::vector<WorkerEnd>>& workers, std::set<std::string>& failed_hosts) {
  Counts c;
  for (const auto& [host, ends] : workers)
    for (WorkerEnd e : ends) {
      c.all++;
      if (e == WorkerEnd::kRunning || e == WorkerEnd::kRegistered) {
        c.running++;
        c.registered += e == WorkerEnd::kRegistered;
      } else if (succeeded(e)) {
        c.succeeded++;
        c.earlier += e == WorkerEnd::kSucceededEarlier;
      } else {
        c.failed++;
        failed_hosts.insert(host);
      }
    }
  return c;
}

RoundVerdict failed(std::string why) {
  RoundVerdict v;
  v.action = RoundVerdict::kFailed;
  v.message = std::move(why);
  return v;
}

// A worker finished (and none failed): the job has succeeded once no other worker runs;
// when one finished before this round began, the round never forms, and those registered in
// it wait for nothing.
RoundVerdict finished_verdict(const Counts& c) {
  RoundVerdict v;
  int waited_for = c.running - (c.earlier > 0 ? c.registered : 0);
  v.action = waited_for == 0 ? RoundVerdict::kSucceeded : RoundVerdict::kFinishing;
  return v;
}

// The verdict over s.workers (s.joining left out).
RoundVerdict judge_workers(const RoundState& s) {
  RoundVerdict v;
  std::set<std::string> failed_hosts;
  Counts c = count_ends(s.workers, failed_hosts);
  if (c.succeeded > 0 && c.failed > 0)
    return failed(std::to_string(c.failed) + " worker(s) failed after " + std::to_string(c.succeeded) +
                  " finished: a finished training is not reset");
  if (c.succeeded > 0) return finished_verdict(c);
  if (c.failed == 0 && !s.hosts_changed) return v;
  if (c.all > 0 && c.failed == c.all) return failed("every worker failed");
  v.blacklist = failed_hosts;
  bool all_blacklisted = !s.workers.empty();
  for (const auto& [host, _] : s.workers)
    if (!failed_hosts.count(host) && !s.blacklisted.count(host)) all_blacklisted = false;
  if (all_blacklisted) {
    v.action = RoundVerdict::kFailed;
    v.message = "every host of the job is blacklisted";
    return v;
  }
  if (s.reset_limit && s.resets >= *s.reset_limit) {
    v.action = RoundVerdict::kFailed;
    v.message = "reset limit " + std::to_string(*s.reset_limit) + " reached (--reset-limit)";
    return v;
  }
  v.action = RoundVerdict::kReset;
  return v;
}

}  // namespace

RoundVerdict judge_round(const RoundState& s) {
  bool finished = false;
  for (const auto& [host, ends] : s.workers)
    finished = finished || std::any_of(ends.begin(), ends.end(), succeeded);
  if (finished || s.joining.empty()) return judge_workers(s);
  RoundState all = s;  // no worker finished: the joining ones count as any other
  for (const auto& [host, ends] : s.joining) all.workers[host].insert(all.workers[host].end(), ends.begin(), ends.end());
  all.joining.clear();
  return judge_workers(all);
}

WaitVerdict judge_wait(long long available, int min_np, double waited, double timeout) {
  WaitVerdict v;
  if (available >= min_np) {
    v.action = WaitVerdict::kStart;
    return v;
  }
  std::string missing = std::to_string(min_np - available) + " slot(s) missing: " + std::to_string(available) +
                        " available, --min-np " + std::to_string(min_np);
  if (waited >= timeout) {
    v.action = WaitVerdict::kGiveUp;
    v.message = "elastic timeout: " + seconds(timeout) + " s waiting for hosts, " + missing;
  } else {
    v.message = "waiting up to " + seconds(timeout) + " s for hosts, " + missing;
  }
  return v;
}

std::string restart_line(bool workers_ran, bool interrupted, int exit_code, int restarts, int max_restarts) {
  if (!workers_ran || interrupted || exit_code == 0 || restarts >= max_restarts) return "";
  return "restart " + std::to_string(restarts + 1) + " of " + std::to_string(max_restarts) +
         ": the job failed (exit code " + std::to_string(exit_code) + "); every worker starts again with " +
         "HVDRUN_RESTART_COUNT=" + std::to_string(restarts + 1);
}

}  // namespace hvdrun
