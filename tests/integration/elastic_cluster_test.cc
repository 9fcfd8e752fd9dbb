// Elastic jobs across the netns hosts (tests/cluster/cluster.sh, brought up once for the
// binary): the real hvdrun with remote agents, libhvdrun and hvdrun.torch.elastic workers
// (elastic_cluster_worker.py, Debian's /usr/bin/python3 with torch; skipped without it),
// their hosts from a discovery script that prints a file the test rewrites. Each scenario
// checks the ranks and sizes, the batch restored after a reset, the survivors' PIDs, the
// parameters equal on every rank at the end, and that nothing is left on any host.
#include <sys/stat.h>

#include <algorithm>
#include <regex>
#include <set>

#include "cluster_test_util.h"
#include "elastic_steps.h"

using namespace testing_hvdrun;
using namespace cluster_test;

[[maybe_unused]] static auto* const kEnv = ::testing::AddGlobalTestEnvironment(new Cluster);

namespace {

bool have_torch() {
  static int have = -1;
  if (have < 0) have = run({"/usr/bin/python3", "-c", "import torch"}, 120).exit_code == 0;
  return have == 1;
}

#define REQUIRE_TORCH_CLUSTER()                                                                        \
  REQUIRE_CLUSTER();                                                                                   \
  if (kSanitized) GTEST_SKIP() << "a sanitizer build: python3 cannot load its libhvdrun";              \
  if (!have_torch()) GTEST_SKIP() << "/usr/bin/python3 has no torch"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif

std::set<std::string> shm_entries() {
  std::set<std::string> s;
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm")) s.insert(e.path().filename().string());
  return s;
}

// One elastic job on the test hosts, its hosts those of the file `hosts` (rewritten by set_hosts).
class Job {
 public:
  Job(const std::string& hosts, std::vector<std::string> args, std::map<std::string, std::string> env = {})
      : dir_(make_temp_dir()), shm_(shm_entries()) {
    set_hosts(hosts);
    std::ofstream(dir_ + "/discover.sh") << "#!/bin/sh\ncat " << dir_ << "/hosts\n";
    chmod((dir_ + "/discover.sh").c_str(), 0755);
    // hvdrun's stderr in a file the test reads while the job runs.
    // (--start-timeout: four torch imports on a loaded 2-core machine may take long)
    std::vector<std::string> argv{"sh", "-c", "exec \"$0\" \"$@\" 2>" + dir_ + "/err", kHvdrun, "--start-timeout", "120",
                                  "--host-discovery-script", dir_ + "/discover.sh"};
    argv.insert(argv.end(), args.begin(), args.end());
    for (const char* a : {"/usr/bin/python3", TEST_SOURCE_DIR "/integration/elastic_cluster_worker.py"}) argv.push_back(a);
    env["HOME"] = Cluster::home();
    env["EW_DIR"] = dir_;
    env["PYTHONPATH"] = PYTHON_SOURCE_DIR;
    env["HVDRUN_LIBRARY"] = LIBHVDRUN;
    p_ = std::make_unique<Process>(argv, env);
  }
  ~Job() { std::filesystem::remove_all(dir_); }
  void set_hosts(const std::string& text) {
    std::ofstream(dir_ + "/hosts.tmp") << text;
    std::filesystem::rename(dir_ + "/hosts.tmp", dir_ + "/hosts");
  }
  // Waits (up to `seconds`) until rank 0 has done batch `batch` or later at size `size`.
  ::testing::AssertionResult reached(int batch, int size, double seconds = 150) {
    bool ok = wait_until([&] {
      std::istringstream in(read_file(dir_ + "/progress"));
      int b = -1, s = -1;
      in >> b >> s;
      return b >= batch && s == size;
    }, seconds);
    if (ok) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "progress '" << read_file(dir_ + "/progress") << "', stderr:\n"
                                         << read_file(dir_ + "/err");
  }
  bool said(const std::string& part, double seconds = 60) {
    return wait_until([&] { return read_file(dir_ + "/err").find(part) != std::string::npos; }, seconds);
  }
  pid_t pid(const std::string& slot) { return std::atoi(read_file(dir_ + "/pid." + slot).c_str()); }
  // Training ends at the ranks' next agreement; the job's outcome, nothing left behind.
  Outcome finish() {
    std::ofstream(dir_ + "/stop") << "";
    Outcome o = p_->wait(60);
    o.err = read_file(dir_ + "/err");
    EXPECT_TRUE(wait_until([] { return leftovers().empty(); }, 15)) << leftovers();
    std::set<std::string> shm_now = shm_entries(), added;
    for (const auto& e : shm_now)
      if (!shm_.count(e) && e.find("hvd") != std::string::npos) added.insert(e);
    EXPECT_TRUE(added.empty()) << *added.begin();
    return o;
  }

 private:
  std::string dir_;
  std::set<std::string> shm_;
  std::unique_ptr<Process> p_;
};

// What every scenario checks of the training: each size's ranks on the slots expected (in
// the order of `sizes`, slot -> rank), each slot one process for its whole life, the batch
// after each reset the one restored (the last committed: the last batch done before it, or
// the next), and at the end every rank of the last size done with the same parameters.
void check_training(const Outcome& o, const std::vector<std::map<std::string, int>>& sizes) {
  ASSERT_FALSE(o.timed_out) << o.err;
  ASSERT_EQ(o.exit_code, 0) << o.out << o.err;
  auto s = steps(o.out);
  std::map<std::string, std::set<long>> pids;
  for (const auto& x : s) pids[x.slot].insert(x.pid);
  for (const auto& [slot, p] : pids) EXPECT_EQ(p.size(), 1u) << slot;
  // The rounds as rank 0 saw them: its steps, in order, grouped by size.
  std::vector<std::pair<int, std::vector<int>>> rounds;  // size, rank 0's batches
  for (const auto& x : s) {
    if (x.rank != 0) continue;
    if (rounds.empty() || rounds.back().first != x.size) rounds.push_back({x.size, {}});
    rounds.back().second.push_back(x.batch);
  }
  ASSERT_EQ(rounds.size(), sizes.size()) << o.out;
  for (size_t i = 0; i < rounds.size(); ++i) {
    EXPECT_EQ(rounds[i].first, static_cast<int>(sizes[i].size()));
    for (const auto& x : s)
      if (x.size == rounds[i].first && sizes[i].count(x.slot)) {
        EXPECT_EQ(x.rank, sizes[i].at(x.slot)) << x.slot;
      }
    if (i == 0) continue;
    int last = rounds[i - 1].second.back(), first = rounds[i].second.front();
    EXPECT_TRUE(first == last || first == last + 1) << "batch " << last << " then " << first;
  }
  static const std::regex done(R"(DONE rank=(\d+) size=(\d+) batch=\d+ params=(\w+))");
  std::set<std::string> params;
  int n = 0;
  for (const auto& line : split_lines(o.out)) {
    std::smatch m;
    if (!std::regex_search(line, m, done)) continue;
    ++n;
    params.insert(m[3]);
    EXPECT_EQ(std::stoi(m[2]), static_cast<int>(sizes.back().size())) << line;
  }
  EXPECT_EQ(n, static_cast<int>(sizes.back().size())) << o.out;
  EXPECT_EQ(params.size(), 1u) << o.out;
}

bool said(const Outcome& o, const std::string& part) { return o.err.find(part) != std::string::npos; }

TEST(ElasticCluster, AHostsRanksKilledTheSurvivorsGoOnInTheirProcesses) {
  REQUIRE_TORCH_CLUSTER();
  Job job("h1:1\nh2:1\nh3:2\n", {"--min-np", "1"});
  ASSERT_TRUE(job.reached(3, 4));
  pid_t a = job.pid("h3:0"), b = job.pid("h3:1");
  kill(a, SIGKILL);
  kill(b, SIGKILL);
  ASSERT_TRUE(job.reached(0, 2));
  auto o = job.finish();
  check_training(o, {{{"h1:0", 0}, {"h2:0", 1}, {"h3:0", 2}, {"h3:1", 3}}, {{"h1:0", 0}, {"h2:0", 1}}});
  EXPECT_TRUE(said(o, "hvdrun: reset 1: host h3 failed (rank ")) << o.err;
  EXPECT_TRUE(said(o, "was killed by signal 9 (SIGKILL)")) << o.err;
  EXPECT_TRUE(said(o, "host h3 blacklisted for good; size 4 -> 2")) << o.err;
}

TEST(ElasticCluster, AHostWhoseLinkIsCutIsLostAfterTheHeartbeatTimeout) {
  REQUIRE_TORCH_CLUSTER();
  Job job("h1:1\nh2:1\nh3:2\n", {"--min-np", "1"}, {{"HVDRUN_HEARTBEAT_TIMEOUT", "3"}});
  ASSERT_TRUE(job.reached(3, 4));
  sh("ip -n hvdh2 link set eth0 down");
  bool shrank = job.reached(0, 3);
  sh("ip -n hvdh2 link set eth0 up");
  ASSERT_TRUE(shrank);
  auto o = job.finish();
  check_training(o, {{{"h1:0", 0}, {"h2:0", 1}, {"h3:0", 2}, {"h3:1", 3}}, {{"h1:0", 0}, {"h3:0", 1}, {"h3:1", 2}}});
  // (silent for 3 s, or 4 on a loaded machine whose driver woke late)
  EXPECT_TRUE(said(o, "hvdrun: reset 1: host h2 lost (its agent silent for ")) << o.err;
  EXPECT_TRUE(said(o, " s, HVDRUN_HEARTBEAT_TIMEOUT 3 s; rank(s) 1 killed), host h2 blacklisted for good; size 4 -> 3"))
      << o.err;
}

TEST(ElasticCluster, ARankStoppedPastTheHeartbeatTimeoutIsKilledAndItsHostLeft) {
  REQUIRE_TORCH_CLUSTER();
  Job job("h1:1\nh2:1\nh3:2\n", {"--min-np", "1"}, {{"HVDRUN_HEARTBEAT_TIMEOUT", "3"}});
  ASSERT_TRUE(job.reached(3, 4));
  kill(job.pid("h2:0"), SIGSTOP);
  ASSERT_TRUE(job.reached(0, 3));
  auto o = job.finish();
  check_training(o, {{{"h1:0", 0}, {"h2:0", 1}, {"h3:0", 2}, {"h3:1", 3}}, {{"h1:0", 0}, {"h3:0", 1}, {"h3:1", 2}}});
  EXPECT_TRUE(said(o, "hvdrun: host h2: hvdrun --agent: a worker stopped for ")) << o.err;
  EXPECT_TRUE(said(o, " s (HVDRUN_HEARTBEAT_TIMEOUT): killed")) << o.err;
  EXPECT_TRUE(said(o, "hvdrun: reset 1: host h2 failed (rank 1 was killed by signal 9 (SIGKILL)), host h2 "
                      "blacklisted for good; size 4 -> 3"))
      << o.err;
}

TEST(ElasticCluster, AHostAddedThenOneRemoved) {
  REQUIRE_TORCH_CLUSTER();
  Job job("h1:1\nh2:1\n", {"--min-np", "1"});
  ASSERT_TRUE(job.reached(2, 2));
  job.set_hosts("h1:1\nh2:1\nh3:2\n");
  ASSERT_TRUE(job.reached(0, 4));
  job.set_hosts("h1:1\nh3:2\n");
  ASSERT_TRUE(job.reached(0, 3));
  auto o = job.finish();
  check_training(o, {{{"h1:0", 0}, {"h2:0", 1}},
                     {{"h1:0", 0}, {"h2:0", 1}, {"h3:0", 2}, {"h3:1", 3}},
                     {{"h1:0", 0}, {"h3:0", 1}, {"h3:1", 2}}});
  EXPECT_TRUE(said(o, "hvdrun: reset 1: hosts added (h3); size 2 -> 4")) << o.err;
  EXPECT_TRUE(said(o, "hvdrun: reset 2: hosts removed (h2); size 4 -> 3")) << o.err;
}

TEST(ElasticCluster, BelowMinNpItWaitsUntilAHostJoins) {
  REQUIRE_TORCH_CLUSTER();
  Job job("h1:1\nh2:1\nh3:2\n", {"--min-np", "3"});
  ASSERT_TRUE(job.reached(3, 4));
  kill(job.pid("h3:0"), SIGKILL);
  // h3 is blacklisted: 2 slots of --min-np 3 until h4 comes.
  ASSERT_TRUE(job.said("hvdrun: elastic: waiting up to 600 s for hosts, 1 slot(s) missing: 2 available, --min-np 3"));
  job.set_hosts("h1:1\nh2:1\nh3:2\nh4:1\n");
  ASSERT_TRUE(job.reached(0, 3));
  auto o = job.finish();
  check_training(o, {{{"h1:0", 0}, {"h2:0", 1}, {"h3:0", 2}, {"h3:1", 3}}, {{"h1:0", 0}, {"h2:0", 1}, {"h4:0", 2}}});
  EXPECT_TRUE(said(o, "hvdrun: reset 1: host h3 failed (rank 2 was killed by signal 9 (SIGKILL); rank(s) 3 killed)"))
      << o.err;
  EXPECT_TRUE(said(o, "size 4 -> 3")) << o.err;
}

}  // namespace
