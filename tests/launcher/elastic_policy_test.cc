// Elastic decisions: discovery's output and runs, the blacklist's cooldown, a round's end
// (reset, success, failure, reset limit, exit 0 while others run), the --min-np wait.
#include "launcher/elastic_policy.h"

#include <gtest/gtest.h>

#include "launcher/exit_status.h"

namespace hvdrun {
namespace {

std::vector<HostSlots> parsed(std::string_view out, int bare = 1) {
  auto r = parse_discovery_output(out, bare, "d.sh");
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
  return r.ok() ? *r : std::vector<HostSlots>{};
}

std::string parse_error(std::string_view out) {
  auto r = parse_discovery_output(out, 1, "d.sh");
  if (r.ok()) return "";
  EXPECT_EQ(r.error().message.find('\n'), std::string::npos);
  return r.error().message;
}

TEST(ElasticDiscovery, LinesInOrderBareHostsTakeSlotsPerHost) {
  EXPECT_EQ(parsed("zeta:2\nalpha\n  mid:4  \n\n[::1]:3\n[fe80::1]\n", 8),
            (std::vector<HostSlots>{{"zeta", 2}, {"alpha", 8}, {"mid", 4}, {"::1", 3}, {"fe80::1", 8}}));
  EXPECT_EQ(parsed("h1\r\nh2:2\r\n"), (std::vector<HostSlots>{{"h1", 1}, {"h2", 2}}));
  EXPECT_TRUE(parsed("").empty());
  EXPECT_TRUE(parsed("\n  \n").empty());
}

TEST(ElasticDiscovery, BadLineNamedWithItsNumber) {
  const std::pair<const char*, const char*> bad[] = {
      {"a:2\nb:x\n", "line 2 'b:x': expected host[:slots]"},
      {"a:0\n", "line 1 'a:0'"},
      {"a:\n", "line 1 'a:'"},
      {"a\n\nb:-3\n", "line 3 'b:-3'"},
      {"a\n-oProxyCommand=x\n", "line 2"},
      {"a\nb c\n", "line 2 'b c'"},
      {"[::1\n", "line 1 '[::1'"},
      {"[::1]x\n", "line 1"},
      {"a:1\nb\na:2\n", "line 3 'a:2': host 'a' listed twice"},
  };
  for (const auto& [out, what] : bad) {
    std::string m = parse_error(out);
    EXPECT_NE(m.find(what), std::string::npos) << out << " -> " << m;
    EXPECT_NE(m.find("--host-discovery-script 'd.sh'"), std::string::npos) << m;
  }
}

TEST(ElasticDiscovery, FirstFailureFatalLaterOnesWarn) {
  auto first = judge_discovery({false, 3, ""}, true, "d.sh", 30);
  EXPECT_TRUE(first.fatal);
  EXPECT_FALSE(first.use);
  EXPECT_NE(first.message.find("exited with status 3"), std::string::npos);
  auto later = judge_discovery({false, 3, ""}, false, "d.sh", 30);
  EXPECT_FALSE(later.fatal);
  EXPECT_FALSE(later.use);
  EXPECT_NE(later.message.find("the hosts it listed last stand"), std::string::npos);
  auto hung = judge_discovery({true, 137, ""}, false, "d.sh", 30);
  EXPECT_NE(hung.message.find("'d.sh': still running after 30 s (HVDRUN_DISCOVERY_TIMEOUT): killed"),
            std::string::npos)
      << hung.message;
  auto bad = judge_discovery({false, 0, "line 2 'x y': ..."}, true, "d.sh", 30);
  EXPECT_TRUE(bad.fatal);
  EXPECT_EQ(bad.message, "line 2 'x y': ...");
  auto good = judge_discovery({false, 0, ""}, true, "d.sh", 30);
  EXPECT_TRUE(good.use);
  EXPECT_FALSE(good.fatal);
  EXPECT_EQ(good.message, "");
}

TEST(ElasticBlacklist, ForGoodWithoutARange) {
  HostBlacklist b(std::nullopt);
  EXPECT_FALSE(b.blocked("a", 0));
  EXPECT_FALSE(b.add("a", 0, 0.5));
  EXPECT_TRUE(b.blocked("a", 1e9));
  EXPECT_FALSE(b.blocked("b", 0));
  EXPECT_EQ(b.usable({{"a", 1}, {"b", 2}}, 5), (std::vector<HostSlots>{{"b", 2}}));
}

// A new round takes the hosts neither blacklisted nor still starting their agent, in
// discovery's order.
TEST(ElasticRoundHosts, NeitherBlacklistedNorStartingTheirAgent) {
  HostBlacklist b(std::make_pair(10, 100));
  b.add("b", 0, 0);  // 20 s
  std::vector<HostSlots> hosts{{"a", 1}, {"b", 2}, {"c", 3}, {"d", 4}};
  EXPECT_EQ(round_hosts(hosts, b, 5, {"c"}), (std::vector<HostSlots>{{"a", 1}, {"d", 4}}));
  EXPECT_EQ(round_hosts(hosts, b, 25, {}), hosts);  // b's cooldown over, c's agent runs
}

TEST(ElasticBlacklist, HorovodsCooldownGrowsAndIsClamped) {
  HostBlacklist b(std::make_pair(10, 100));
  // lo * 2^1 + u * lo: 20 .. 30 s the first time.
  EXPECT_DOUBLE_EQ(*b.add("a", 0, 0.0), 20);
  EXPECT_TRUE(b.blocked("a", 19.9));
  EXPECT_FALSE(b.blocked("a", 20));
  // Within its cooldown a second failure does not count twice.
  HostBlacklist c(std::make_pair(10, 100));
  EXPECT_DOUBLE_EQ(*c.add("a", 0, 0.5), 25);
  EXPECT_DOUBLE_EQ(*c.add("a", 5, 0.9), 20);  // what is left of it
  EXPECT_EQ(c.count("a"), 1);
  // After it: 10 * 4 + u * 10; then 80 + ..., clamped to 100.
  EXPECT_DOUBLE_EQ(*c.add("a", 30, 0.5), 45);
  EXPECT_DOUBLE_EQ(*c.add("a", 100, 0.5), 85);
  EXPECT_DOUBLE_EQ(*c.add("a", 200, 0.5), 100);
  EXPECT_EQ(c.count("a"), 4);
  // lo == hi: always lo.
  HostBlacklist d(std::make_pair(7, 7));
  EXPECT_DOUBLE_EQ(*d.add("x", 0, 0.99), 7);
}

RoundState round_of(std::map<std::string, std::vector<WorkerEnd>> w) {
  RoundState s;
  s.workers = std::move(w);
  return s;
}

constexpr auto R = WorkerEnd::kRunning;
constexpr auto S = WorkerEnd::kSucceeded;
constexpr auto F = WorkerEnd::kFailed;
constexpr auto E = WorkerEnd::kExitedEarly;
constexpr auto Se = WorkerEnd::kSucceededEarlier;
constexpr auto Rr = WorkerEnd::kRegistered;

TEST(ElasticRound, AFailedHostIsBlacklistedAndTheJobResets) {
  auto v = judge_round(round_of({{"a", {R, R}}, {"b", {F, R}}}));
  EXPECT_EQ(v.action, RoundVerdict::kReset);
  EXPECT_EQ(v.blacklist, (std::set<std::string>{"b"}));
  auto nothing = judge_round(round_of({{"a", {R, R}}, {"b", {R}}}));
  EXPECT_EQ(nothing.action, RoundVerdict::kGoOn);
  auto changed = round_of({{"a", {R}}});
  changed.hosts_changed = true;
  EXPECT_EQ(judge_round(changed).action, RoundVerdict::kReset);
  EXPECT_TRUE(judge_round(changed).blacklist.empty());
}

TEST(ElasticRound, ExitZeroWhileOthersRunIsAFailureNotSuccess) {
  // Horovod's #1994: a rank that caught its error and exited 0 ended the job "successfully".
  auto early = judge_round(round_of({{"a", {R, R}}, {"b", {E}}}));
  EXPECT_EQ(early.action, RoundVerdict::kReset);
  EXPECT_EQ(early.blacklist, (std::set<std::string>{"b"}));
  // Finished after hvd_shutdown(): wait for the others, then success.
  EXPECT_EQ(judge_round(round_of({{"a", {S, R}}, {"b", {R}}})).action, RoundVerdict::kFinishing);
  EXPECT_EQ(judge_round(round_of({{"a", {S, S}}, {"b", {S}}})).action, RoundVerdict::kSucceeded);
  auto late = judge_round(round_of({{"a", {S, S}}, {"b", {F}}}));
  EXPECT_EQ(late.action, RoundVerdict::kFailed);
  EXPECT_NE(late.message.find("1 worker(s) failed after 2 finished"), std::string::npos) << late.message;
}

// Found by tests/chaos/chaos_elastic.py: a host added while the last round finished its
// training made a round the finished workers never joined; its new worker waited for them.
TEST(ElasticRound, AFinishedWorkerEndsTheJobNoNewRoundTheJoiningLeftOut) {
  auto s = round_of({{"a", {S, R}}});
  s.joining = {{"b", {R}}};
  s.hosts_changed = true;
  EXPECT_EQ(judge_round(s).action, RoundVerdict::kFinishing);  // no round for the change
  s.workers = {{"a", {S, S}}};
  EXPECT_EQ(judge_round(s).action, RoundVerdict::kSucceeded);  // b's worker is not waited for
  s.joining = {{"b", {F}}};
  EXPECT_EQ(judge_round(s).action, RoundVerdict::kSucceeded);  // nor is its failure the job's
  s.workers = {{"a", {S, F}}};
  EXPECT_EQ(judge_round(s).action, RoundVerdict::kFailed);  // the finished round's own failure is
  // Before any finished, a joining worker counts as any other.
  auto j = round_of({{"a", {R}}});
  j.joining = {{"b", {F}}};
  auto v = judge_round(j);
  EXPECT_EQ(v.action, RoundVerdict::kReset);
  EXPECT_EQ(v.blacklist, (std::set<std::string>{"b"}));
  j.workers = {{"a", {F}}};
  EXPECT_EQ(judge_round(j).message, "every worker failed");
  j.joining = {{"b", {R}}};
  EXPECT_EQ(judge_round(j).action, RoundVerdict::kReset);
}

// A worker that finished in the round before (a failure ended it while the worker finished)
// never joins this one: as in Horovod, its success ends the job; the workers registered in
// this round wait in hvd_init for nothing and are not waited for (the driver stops them),
// one still running its code is (it may be finishing too). Found by the last session: they
// waited until the start time-out, and the job exited 4.
TEST(ElasticRound, AWorkerThatFinishedBeforeTheRoundBeganEndsTheJobThoseWaitingInItAreNotWaitedFor) {
  auto s = round_of({{"a", {Se, Rr}}, {"c", {Rr}}});
  EXPECT_EQ(judge_round(s).action, RoundVerdict::kSucceeded);
  s.workers["d"] = {R};  // not registered in this round yet
  EXPECT_EQ(judge_round(s).action, RoundVerdict::kFinishing);
  s.workers["d"] = {Se};
  EXPECT_EQ(judge_round(s).action, RoundVerdict::kSucceeded);
  s.workers["d"] = {F};  // a failure of the round's own is the job's
  EXPECT_EQ(judge_round(s).action, RoundVerdict::kFailed);
  // One that finished in this round: the round formed, its registered workers train on.
  EXPECT_EQ(judge_round(round_of({{"a", {S, Rr}}, {"c", {Rr}}})).action, RoundVerdict::kFinishing);
  // Before any finished, a registered worker counts as any running one.
  auto v = judge_round(round_of({{"a", {Rr, Rr}}, {"b", {F}}}));
  EXPECT_EQ(v.action, RoundVerdict::kReset);
  EXPECT_EQ(v.blacklist, (std::set<std::string>{"b"}));
}

TEST(ElasticRound, EndsInHorovodsOrder) {
  auto all = judge_round(round_of({{"a", {F, E}}, {"b", {F}}}));
  EXPECT_EQ(all.action, RoundVerdict::kFailed);
  EXPECT_EQ(all.message, "every worker failed");
  auto black = round_of({{"a", {R}}, {"b", {F}}});
  black.blacklisted = {"a"};
  auto v = judge_round(black);
  EXPECT_EQ(v.action, RoundVerdict::kFailed);
  EXPECT_EQ(v.message, "every host of the job is blacklisted");
  EXPECT_EQ(v.blacklist, (std::set<std::string>{"b"}));
  for (int limit : {0, 1, 2}) {
    auto s = round_of({{"a", {R}}, {"b", {F}}});
    s.reset_limit = limit;
    for (int resets = 0; resets <= 3; ++resets) {
      s.resets = resets;
      auto r = judge_round(s);
      EXPECT_EQ(r.action, resets < limit ? RoundVerdict::kReset : RoundVerdict::kFailed) << limit << " " << resets;
      if (r.action == RoundVerdict::kFailed) {
        EXPECT_EQ(r.message, "reset limit " + std::to_string(limit) + " reached (--reset-limit)");
      }
    }
  }
}

TEST(ElasticWait, StartWaitOrGiveUpNamingTheMissingSlots) {
  EXPECT_EQ(judge_wait(4, 4, 0, 600).action, WaitVerdict::kStart);
  EXPECT_EQ(judge_wait(5, 4, 700, 600).action, WaitVerdict::kStart);
  auto w = judge_wait(2, 4, 10, 600);
  EXPECT_EQ(w.action, WaitVerdict::kWait);
  EXPECT_EQ(w.message, "waiting up to 600 s for hosts, 2 slot(s) missing: 2 available, --min-np 4");
  auto g = judge_wait(1, 4, 600, 600);
  EXPECT_EQ(g.action, WaitVerdict::kGiveUp);
  EXPECT_EQ(g.message, "elastic timeout: 600 s waiting for hosts, 3 slot(s) missing: 1 available, --min-np 4");
}

TEST(ElasticRestarts, OnlyAfterWorkersFailedUpToTheLimit) {
  EXPECT_EQ(restart_line(true, false, 137, 0, 2),
            "restart 1 of 2: the job failed (exit code 137); every worker starts again with HVDRUN_RESTART_COUNT=1");
  EXPECT_NE(restart_line(true, false, 1, 1, 2), "");
  EXPECT_EQ(restart_line(true, false, 1, 2, 2), "");   // used up
  EXPECT_EQ(restart_line(true, false, 0, 0, 2), "");   // success
  EXPECT_EQ(restart_line(true, true, 130, 0, 2), "");  // Ctrl-C ends the job
  EXPECT_EQ(restart_line(false, false, 2, 0, 2), "");  // never started: a bad option, a host down
  EXPECT_EQ(restart_line(true, false, 1, 0, 0), "");   // no --max-restarts
}

}  // namespace
}  // namespace hvdrun
