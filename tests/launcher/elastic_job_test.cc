// Elastic jobs end to end: the real hvdrun, libhvdrun and hvdrun.torch.elastic workers
// (elastic_job_worker.py, Debian's /usr/bin/python3 with torch; skipped without it) on this
// machine, `localhost` and `127.0.0.1` acting as two hosts (as Horovod's tests do): a
// host's ranks SIGKILLed (the survivors keep their processes, the size shrinks, training
// goes on), a host added through the discovery file, every host failing.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <map>
#include <regex>
#include <set>

#include "elastic_steps.h"
#include "process.h"

using testing_hvdrun::Outcome;

namespace {

// Python cannot load a sanitizer build's libhvdrun (the sanitizer's runtime must come first
// in the process): there the torch workers are left to the main build's run of these tests.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif

bool have_torch() {
  static int have = -1;
  if (have < 0) have = testing_hvdrun::run({"/usr/bin/python3", "-c", "import torch"}, 120).exit_code == 0;
  return have == 1;
}

Outcome elastic_job(const std::vector<std::string>& args, std::map<std::string, std::string> env) {
  std::vector<std::string> argv{HVDRUN_BIN};
  argv.insert(argv.end(), args.begin(), args.end());
  for (const char* a : {"/usr/bin/python3", TEST_SOURCE_DIR "/launcher/elastic_job_worker.py"}) argv.push_back(a);
  env["PYTHONPATH"] = PYTHON_SOURCE_DIR;
  env["HVDRUN_LIBRARY"] = LIBHVDRUN;
  return testing_hvdrun::run(argv, 240, env);
}

// slot -> its pids, over every STEP line.
std::map<std::string, std::set<long>> pids_by_slot(const std::vector<Step>& s) {
  std::map<std::string, std::set<long>> m;
  for (const auto& x : s) m[x.slot].insert(x.pid);
  return m;
}

int count(const std::string& text, const std::string& part) {
  int n = 0;
  for (size_t p = text.find(part); p != std::string::npos; p = text.find(part, p + 1)) ++n;
  return n;
}

TEST(ElasticJob, AHostsRanksKilledTheSurvivorsKeepTheirProcessesAndTrainingGoesOn) {
  if (kSanitized) GTEST_SKIP() << "a sanitizer build: python3 cannot load its libhvdrun";
  if (!have_torch()) GTEST_SKIP() << "/usr/bin/python3 has no torch";
  auto o = elastic_job({"--min-np", "1", "-H", "localhost:2,127.0.0.1:2", "-np", "4"}, {{"EW_KILL_SLOT", "127.0.0.1:0"}});
  ASSERT_FALSE(o.timed_out);
  ASSERT_EQ(o.exit_code, 0) << o.out << o.err;
  EXPECT_EQ(count(o.err, "hvdrun: reset "), 1) << o.err;
  EXPECT_NE(o.err.find("hvdrun: reset 1: host 127.0.0.1 failed (rank 2 was killed by signal 9 (SIGKILL)"),
            std::string::npos)
      << o.err;
  EXPECT_NE(o.err.find("host 127.0.0.1 blacklisted for good; size 4 -> 2"), std::string::npos) << o.err;
  auto s = steps(o.out);
  auto pids = pids_by_slot(s);
  EXPECT_EQ(pids["localhost:0"].size(), 1u);  // one process each, before and after the reset
  EXPECT_EQ(pids["localhost:1"].size(), 1u);
  int before = 0, after = 0, last_batch = -1, first_batch = 1 << 30;
  for (const auto& x : s) {
    if (x.size == 4) ++before;
    if (x.size != 2) continue;
    ++after;
    last_batch = std::max(last_batch, x.batch);
    first_batch = std::min(first_batch, x.batch);
    EXPECT_EQ(x.slot, "localhost:" + std::to_string(x.rank));
  }
  EXPECT_GE(before, 4 * 5);  // batches 0..4 on four ranks
  EXPECT_GT(after, 0);
  EXPECT_EQ(last_batch, 29);
  // The line names the commit the survivors resumed from: the worker commits once per batch,
  // so its number is their first batch at size 2.
  std::smatch m;
  ASSERT_TRUE(std::regex_search(o.err, m, std::regex("size 4 -> 2; restored commit (\\d+); "))) << o.err;
  EXPECT_EQ(std::stoi(m[1]), first_batch) << o.err;
  EXPECT_EQ(count(o.out, "DONE rank="), 2) << o.out;
  EXPECT_EQ(count(o.out, "size=2 batch=30"), 2) << o.out;
}

TEST(ElasticJob, AHostAddedThroughTheDiscoveryFileJoinsTheRunningJob) {
  if (kSanitized) GTEST_SKIP() << "a sanitizer build: python3 cannot load its libhvdrun";
  if (!have_torch()) GTEST_SKIP() << "/usr/bin/python3 has no torch";
  std::string dir = testing_hvdrun::make_temp_dir();
  std::string hosts = dir + "/hosts", script = dir + "/discover.sh";
  std::ofstream(hosts) << "localhost:2\n";
  std::ofstream(script) << "#!/bin/sh\ncat " << hosts << "\n";
  ASSERT_EQ(chmod(script.c_str(), 0755), 0);
  auto o = elastic_job({"--min-np", "1", "--host-discovery-script", script},
                       {{"EW_ADD_AT", "5"}, {"EW_HOSTS", hosts}, {"EW_FINAL_SIZE", "3"}});
  ASSERT_FALSE(o.timed_out);
  ASSERT_EQ(o.exit_code, 0) << o.out << o.err;
  EXPECT_NE(o.err.find("hvdrun: reset 1: hosts added (127.0.0.1); size 2 -> 3"), std::string::npos) << o.err;
  auto pids = pids_by_slot(steps(o.out));
  EXPECT_EQ(pids["localhost:0"].size(), 1u);
  EXPECT_EQ(pids["localhost:1"].size(), 1u);
  EXPECT_EQ(pids["127.0.0.1:0"].size(), 1u);
  EXPECT_EQ(count(o.out, "DONE rank="), 3) << o.out;
  EXPECT_EQ(count(o.out, "size=3 batch="), 3) << o.out;
}

// A worker that finishes while a failure ends its round (rank 0, which finishes once
// hvdrun has announced round 2) never joins the next round: the job has succeeded, and the
// survivor that would wait for it in hvd_init (rank 1, whose extra batch the failure of
// rank 2 ended) is stopped. It waited until the start time-out before (exit 4).
TEST(ElasticJob, AWorkerFinishingAsAFailureEndsItsRoundEndsTheJobTheSurvivorStopped) {
  if (kSanitized) GTEST_SKIP() << "a sanitizer build: python3 cannot load its libhvdrun";
  if (!have_torch()) GTEST_SKIP() << "/usr/bin/python3 has no torch";
  auto o = elastic_job({"--min-np", "1", "-H", "localhost:2,127.0.0.1:1", "-np", "3"},
                       {{"EW_BATCHES", "3"}, {"EW_END_KILL_SLOT", "127.0.0.1:0"}, {"EW_EXTRA_SLOT", "localhost:1"},
                        {"EW_LATE_SLOT", "localhost:0"}});
  ASSERT_FALSE(o.timed_out);
  EXPECT_EQ(o.exit_code, 0) << o.out << o.err;
  EXPECT_NE(o.err.find("hvdrun: reset 1: host 127.0.0.1 failed (rank 2 was killed by signal 9 (SIGKILL))"),
            std::string::npos)
      << o.err;
  EXPECT_NE(o.err.find("hvdrun: elastic: the workers finished before round 2 formed; its rank(s) 1, which would wait "
                       "for them, stopped"),
            std::string::npos)
      << o.err;
  EXPECT_EQ(count(o.out, "DONE rank="), 1) << o.out;
  EXPECT_EQ(count(o.out, "STEP batch=2 rank="), 3) << o.out;  // the last batch on all three
  EXPECT_EQ(count(o.out, "STEP batch=3 "), 0) << o.out;        // rank 1's extra one never completed
}

TEST(ElasticJob, EveryHostFailingEndsTheJobNamingTheFirstFailure) {
  // Both fail, in either order: the job fails (after a reset, or at once when both ends are
  // seen together), naming the first failure seen.
  auto o = testing_hvdrun::run({HVDRUN_BIN, "--min-np", "1", "-H", "localhost:1,127.0.0.1:1", "sh", "-c", "exit 3"},
                               120);
  ASSERT_FALSE(o.timed_out);
  EXPECT_EQ(o.exit_code, 1) << o.err;
  EXPECT_TRUE(std::regex_search(o.err, std::regex("hvdrun: elastic: (every worker failed|every host of the job is "
                                                  "blacklisted); the first failure: rank [01] \\(host "
                                                  "(localhost|127\\.0\\.0\\.1)\\) exited with code 3")))
      << o.err;
}

// A new host's agent starts in the background: while its start hangs (a launch command that
// never speaks, --start-timeout 600 s), a worker's failure elsewhere is acted on at once
// (here, with --reset-limit 0, it ends the job), and the job's end aborts the start and
// ends its command. (hvdrun's loop waited on the start up to --start-timeout before.)
TEST(ElasticJob, AFailureIsActedOnWhileANewHostsAgentStartHangsAndTheEndAbortsIt) {
  std::string dir = testing_hvdrun::make_temp_dir();
  std::string script = dir + "/discover.sh", hang = dir + "/hang.sh", pidfile = dir + "/agent.pid";
  std::ofstream(script) << "#!/bin/sh\n[ -e " << dir << "/ran ] && echo 192.0.2.1:1\ntouch " << dir
                        << "/ran\necho localhost:1\necho 127.0.0.1:1\n";  // the TEST-NET host from the second run on
  std::ofstream(hang) << "#!/bin/sh\necho $$ > " << pidfile << ".tmp\nmv " << pidfile << ".tmp " << pidfile
                      << "\nexec sleep 600\n";
  for (const auto& f : {script, hang}) ASSERT_EQ(chmod(f.c_str(), 0755), 0);
  // 127.0.0.1's worker fails once the new host's start is under way (its command has started).
  std::string worker = "[ \"$HVDRUN_ELASTIC_SLOT\" = 127.0.0.1:0 ] || exec sleep 600; i=0; while [ ! -e " +
                       pidfile + " ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done; exit 3";
  auto o = testing_hvdrun::run({HVDRUN_BIN, "--min-np", "1", "--reset-limit", "0", "--host-discovery-script", script,
                                "--launch-command", hang + " {host}", "--start-timeout", "600", "sh", "-c", worker},
                               120, {{"HVDRUN_DISCOVERY_INTERVAL", "0.2"}});
  ASSERT_FALSE(o.timed_out) << o.err;
  EXPECT_EQ(o.exit_code, 1) << o.err;
  EXPECT_NE(o.err.find("hvdrun: elastic: reset limit 0 reached (--reset-limit); the first failure: rank 1 (host "
                       "127.0.0.1) exited with code 3"),
            std::string::npos)
      << o.err;
  EXPECT_EQ(o.err.find("192.0.2.1"), std::string::npos) << o.err;  // aborted, not failed
  std::string pid = testing_hvdrun::read_file(pidfile);
  ASSERT_FALSE(pid.empty());
  EXPECT_FALSE(testing_hvdrun::pid_alive(std::stoi(pid)));  // its command ended with the job
}

}  // namespace
