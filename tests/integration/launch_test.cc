// The real hvdrun binary with real workers: output, failures, signals, exit codes, scale.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "process.h"

using namespace testing_hvdrun;

namespace {

const std::string kHvdrun = HVDRUN_BIN;
const std::string kWorker = TEST_WORKER_BIN;

std::vector<std::string> hvd(std::vector<std::string> args) {
  args.insert(args.begin(), kHvdrun);
  return args;
}

// Pids written by `test_worker family` ("pid child" per line).
std::vector<pid_t> read_pids(const std::string& path) {
  std::vector<pid_t> out;
  std::ifstream in(path);
  for (pid_t p; in >> p;) out.push_back(p);
  return out;
}

unsigned checksum(const std::string& s) {
  unsigned h = 2166136261u;
  for (unsigned char c : s) h = (h ^ c) * 16777619u;
  return h;
}

// Checks that every line of `text` is a whole, correctly tagged chatter line; counts per rank.
void check_chatter(const std::string& text, const std::string& stream, int np, std::vector<long>& lines_per_rank) {
  static const std::regex re(R"(^\[(\d+)\]<(stdout|stderr)>:(rank=(\d+) seq=(\d+) [a-z]+) sum=(\d+)$)");
  lines_per_rank.assign(np, 0);
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    ASSERT_NE(end, std::string::npos) << "output does not end with a newline";
    std::string line = text.substr(start, end - start);
    start = end + 1;
    std::smatch m;
    ASSERT_TRUE(std::regex_match(line, m, re)) << "mangled line: " << line.substr(0, 200);
    ASSERT_EQ(m[2].str(), stream);
    ASSERT_EQ(m[1].str(), m[4].str()) << "line of rank " << m[4] << " tagged as rank " << m[1];
    ASSERT_EQ(std::to_string(checksum(m[3].str())), m[6].str()) << line;
    lines_per_rank[std::stoi(m[1].str())]++;
  }
}

}  // namespace

TEST(Launch, TagsEveryLineOfEveryRank) {
  auto o = run(hvd({"-np", "3", "sh", "-c", "echo out $HOROVOD_RANK/$HOROVOD_SIZE; echo err $RANK >&2"}), 30);
  ASSERT_FALSE(o.timed_out);
  EXPECT_EQ(o.exit_code, 0) << o.err;
  auto out = split_lines(o.out);
  std::set<std::string> got(out.begin(), out.end());
  EXPECT_EQ(got, (std::set<std::string>{"[0]<stdout>:out 0/3", "[1]<stdout>:out 1/3", "[2]<stdout>:out 2/3"}));
  auto err = split_lines(o.err);
  std::set<std::string> gerr(err.begin(), err.end());
  EXPECT_EQ(gerr, (std::set<std::string>{"[0]<stderr>:err 0", "[1]<stderr>:err 1", "[2]<stderr>:err 2"}));
}

TEST(Launch, HeavyConcurrentOutputArrivesIntact) {
  // 4 ranks x 20 MB at full speed: 80 MB, every line whole, nothing lost.
  const long long per_rank = 20'000'000;
  auto o = run(hvd({"-np", "4", kWorker, "chatter", std::to_string(per_rank)}), 120);
  ASSERT_FALSE(o.timed_out);
  ASSERT_EQ(o.exit_code, 0) << o.err.substr(0, 500);
  EXPECT_GT(o.out.size() + o.err.size(), 4 * per_rank);
  std::vector<long> out_lines, err_lines;
  check_chatter(o.out, "stdout", 4, out_lines);
  check_chatter(o.err, "stderr", 4, err_lines);
  for (int r = 0; r < 4; ++r) {
    long total = out_lines[r] + err_lines[r];
    EXPECT_GT(total, 100000) << "rank " << r;
    EXPECT_EQ(err_lines[r], total / 8) << "rank " << r;  // every 8th line went to stderr
  }
}

TEST(Launch, SlowReaderOfOneStreamDoesNotDeadlock) {
  // A reader that reads all of stdout before it looks at stderr (a common pattern) while
  // workers write plenty to both: hvdrun must keep serving stdout.
  std::string dir = make_temp_dir();
  std::string script = "(" + kHvdrun + " -np 2 " + kWorker + " chatter 4000000 | (sleep 1; wc -c > " + dir +
                       "/out.count)) 2>&1 >/dev/null | (sleep 2; wc -c > " + dir + "/err.count)";
  auto o = run({"bash", "-c", script}, 60);
  ASSERT_FALSE(o.timed_out) << "deadlock";
  EXPECT_GT(std::stoll(read_file(dir + "/out.count")), 2 * 3'400'000);
  EXPECT_GT(std::stoll(read_file(dir + "/err.count")), 2 * 450'000);
  std::filesystem::remove_all(dir);
}

TEST(Launch, CarriageReturnEndsALineAndLastPartialLineIsFlushed) {
  auto o = run(hvd({"-np", "1", "printf", "10%%\\r20%%\\rdone\\nno newline"}), 30);
  EXPECT_EQ(o.exit_code, 0) << o.err;
  EXPECT_EQ(o.out, "[0]<stdout>:10%\r[0]<stdout>:20%\r[0]<stdout>:done\n[0]<stdout>:no newline\n");
}

TEST(Launch, TimestampPrefix) {
  auto o = run(hvd({"-np", "1", "--prefix-output-with-timestamp", "echo", "hi"}), 30);
  EXPECT_EQ(o.exit_code, 0);
  EXPECT_TRUE(std::regex_match(o.out, std::regex(R"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} \[0\]<stdout>:hi\n)")))
      << o.out;
}

TEST(Launch, OutputFilenameWritesPerRankFiles) {
  std::string dir = make_temp_dir();
  auto o = run(hvd({"-np", "11", "--output-filename", dir, "sh", "-c", "echo o$RANK; echo e$RANK >&2"}), 30);
  ASSERT_EQ(o.exit_code, 0) << o.err;
  EXPECT_EQ(read_file(dir + "/rank.00/stdout"), "o0\n");
  EXPECT_EQ(read_file(dir + "/rank.10/stderr"), "e10\n");
  EXPECT_NE(o.out.find("[10]<stdout>:o10\n"), std::string::npos);  // still echoed
  std::filesystem::remove_all(dir);
}

TEST(Launch, WorkerEnvironmentAndWorkingDirectory) {
  auto o = run(hvd({"-np", "2", "-x", "HVD_TEST_A=1", "-x", "HVD_TEST_B", "sh", "-c",
                    "echo $HVD_TEST_A $HVD_TEST_B $LOCAL_RANK $LOCAL_WORLD_SIZE $WORLD_SIZE $GROUP_RANK "
                    "$MASTER_ADDR ${MASTER_PORT:+port} $PYTHONUNBUFFERED $HOROVOD_HOSTNAME ${OLDPWD:-nooldpwd} $(pwd)"}),
               30, {{"HVD_TEST_B", "fwd"}, {"OLDPWD", "/nowhere"}});
  ASSERT_EQ(o.exit_code, 0) << o.err;
  std::string cwd = std::filesystem::current_path().string();
  EXPECT_NE(o.out.find("[0]<stdout>:1 fwd 0 2 2 0 127.0.0.1 port 1 localhost nooldpwd " + cwd), std::string::npos)
      << o.out;
  EXPECT_NE(o.out.find("[1]<stdout>:1 fwd 1 2 2 0 127.0.0.1 port 1 localhost nooldpwd " + cwd), std::string::npos);
}

// hvdrun --horovod: what horovodrun --gloo gives the workers, and Horovod's store served.
TEST(Launch, HorovodGivesTheWorkersHorovodrunsGlooVariables) {
  for (bool by_env : {false, true}) {
    std::vector<std::string> args = {"-np", "2", "sh", "-c",
                                     "env | grep -E '^HOROVOD_(GLOO|CONTROLLER|CPU_OPERATIONS|HOSTNAME|RANK|SIZE)' | sort"};
    if (!by_env) args.insert(args.begin(), "--horovod");
    auto o = run(hvd(args), 30, by_env ? std::map<std::string, std::string>{{"HVDRUN_HOROVOD", "1"}}
                                       : std::map<std::string, std::string>{});
    ASSERT_EQ(o.exit_code, 0) << o.err;
    for (int r = 0; r < 2; ++r) {
      std::string t = "[" + std::to_string(r) + "]<stdout>:";
      EXPECT_NE(o.out.find(t + "HOROVOD_GLOO_RENDEZVOUS_ADDR=127.0.0.1\n"), std::string::npos) << o.out;
      EXPECT_NE(o.out.find(t + "HOROVOD_GLOO_IFACE=lo\n"), std::string::npos) << o.out;
      EXPECT_NE(o.out.find(t + "HOROVOD_CONTROLLER=gloo\n"), std::string::npos) << o.out;
      EXPECT_NE(o.out.find(t + "HOROVOD_CPU_OPERATIONS=gloo\n"), std::string::npos) << o.out;
      EXPECT_NE(o.out.find(t + "HOROVOD_HOSTNAME=localhost\n"), std::string::npos) << o.out;
      EXPECT_NE(o.out.find(t + "HOROVOD_RANK=" + std::to_string(r) + "\n"), std::string::npos) << o.out;
      EXPECT_NE(o.out.find(t + "HOROVOD_SIZE=2\n"), std::string::npos) << o.out;
    }
    std::smatch m;
    std::string out = o.out;
    ASSERT_TRUE(std::regex_search(out, m, std::regex(R"(HOROVOD_GLOO_RENDEZVOUS_PORT=(\d+))"))) << o.out;
    EXPECT_GT(std::stoi(m[1].str()), 0);
  }
  auto plain = run(hvd({"-np", "1", "sh", "-c", "env | grep -c '^HOROVOD_GLOO' || true"}), 30);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_NE(plain.out.find("[0]<stdout>:0\n"), std::string::npos) << plain.out;  // not without --horovod
}

TEST(Launch, HorovodStoreServedToTheWorkers) {
  if (run({"python3", "-c", "import urllib.request"}, 60).exit_code != 0) GTEST_SKIP() << "no python3";
  // Each rank PUTs its key as Horovod's client would, waits for the other's (polling GET, 404
  // until it is there), then rank 0 DELETEs an ad-hoc key; a GET of a missing key is 404.
  std::string client = std::string(TEST_SOURCE_DIR) + "/integration/horovod_store_client.py";
  auto o = run(hvd({"--horovod", "-np", "2", "python3", client, "probe"}), 60);
  ASSERT_EQ(o.exit_code, 0) << o.out << o.err;
  EXPECT_NE(o.out.find("[0]<stdout>:got b'value\\x00of 1'"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("[1]<stdout>:got b'value\\x00of 0'"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("[0]<stdout>:missing 404 bad 400 post 405"), std::string::npos) << o.out;
}

// Filled to its key cap by a client, the store still takes the job's rendezvous (what
// Horovod's hvd.init() PUTs): it aborted the next init (SIGABRT in Horovod) before.
TEST(Launch, HorovodStoreFilledByAClientStillTakesTheJobsRendezvous) {
  if (run({"python3", "-c", "import urllib.request"}, 60).exit_code != 0) GTEST_SKIP() << "no python3";
  std::string client = std::string(TEST_SOURCE_DIR) + "/integration/horovod_store_client.py";
  std::string dir = make_temp_dir();
  auto o = run(hvd({"--horovod", "-np", "2", "python3", client, "fill", dir}), 120, {{"HVDRUN_HOROVOD_STORE_KEYS", "200"}});
  std::filesystem::remove_all(dir);
  ASSERT_EQ(o.exit_code, 0) << o.out << o.err;
  EXPECT_NE(o.out.find("[0]<stdout>:filled 200 keys, then 507"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("[0]<stdout>:rendezvous done"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("[1]<stdout>:rendezvous done"), std::string::npos) << o.out;
  auto bad = run(hvd({"--horovod", "-np", "1", "true"}), 30, {{"HVDRUN_HOROVOD_STORE_KEYS", "many"}});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("HVDRUN_HOROVOD_STORE_KEYS 'many'"), std::string::npos) << bad.err;
}

TEST(Launch, StdinGoesToRankZeroOnly) {
  std::string input = "line one\nline two\n";
  auto o = run(hvd({"-np", "2", "sh", "-c", "cat; echo end"}), 30, {}, &input);
  ASSERT_EQ(o.exit_code, 0) << o.err;
  EXPECT_NE(o.out.find("[0]<stdout>:line one\n"), std::string::npos);
  EXPECT_NE(o.out.find("[0]<stdout>:line two\n"), std::string::npos);
  EXPECT_EQ(o.out.find("[1]<stdout>:line"), std::string::npos);
  EXPECT_NE(o.out.find("[1]<stdout>:end\n"), std::string::npos);
}

TEST(Launch, FirstFailureTearsDownEveryGroupWithNoSurvivors) {
  std::string dir = make_temp_dir();
  std::string pids = dir + "/pids";
  // Rank 2 fails with 7; the others and every child would sleep forever.
  auto o = run(hvd({"-np", "4", "--kill-grace", "2", "sh", "-c",
                    "if [ $RANK = 2 ]; then exec " + kWorker + " family " + pids + " 7; else exec " + kWorker +
                        " family " + pids + " -1; fi"}),
               60);
  ASSERT_FALSE(o.timed_out);
  EXPECT_EQ(o.exit_code, 7);
  EXPECT_NE(o.err.find("hvdrun: rank 2 (host localhost) exited with code 7"), std::string::npos) << o.err;
  auto all = read_pids(pids);
  EXPECT_EQ(all.size(), 8u);  // 4 workers + 4 children
  EXPECT_TRUE(wait_gone(all, 0.5).empty()) << "processes left running after hvdrun exited";
  std::filesystem::remove_all(dir);
}

TEST(Launch, WorkerKilledBySignalIsReportedAs128PlusSignal) {
  auto o = run(hvd({"-np", "2", "sh", "-c", "if [ $RANK = 1 ]; then kill -9 $$; fi; sleep 30"}), 60);
  EXPECT_EQ(o.exit_code, 137);
  EXPECT_NE(o.err.find("hvdrun: rank 1 (host localhost) was killed by signal 9 (SIGKILL)"), std::string::npos)
      << o.err;
}

TEST(Launch, LingeringChildOfASuccessfulJobIsEnded) {
  std::string dir = make_temp_dir();
  std::string pids = dir + "/pids";
  auto o = run(hvd({"-np", "2", "--kill-grace", "1", kWorker, "family", pids, "0"}), 60);
  EXPECT_EQ(o.exit_code, 0) << o.err;
  auto all = read_pids(pids);
  EXPECT_EQ(all.size(), 4u);
  EXPECT_TRUE(wait_gone(all, 0.5).empty());
  std::filesystem::remove_all(dir);
}

class LaunchSignal : public ::testing::TestWithParam<int> {};

TEST_P(LaunchSignal, TearsDownAndExitsWith128PlusSignal) {
  int sig = GetParam();
  std::string dir = make_temp_dir();
  std::string pids = dir + "/pids";
  Process p(hvd({"-np", "3", "--kill-grace", "2", kWorker, "family", pids, "-1"}));
  ASSERT_TRUE(wait_for_lines(pids, 3, 20)) << "workers did not start";
  p.signal(sig);
  auto o = p.wait(30);
  ASSERT_FALSE(o.timed_out);
  EXPECT_EQ(o.exit_code, 128 + sig);
  EXPECT_NE(o.err.find("hvdrun: received " + std::string(sig == SIGINT ? "SIGINT" : "SIGTERM")), std::string::npos)
      << o.err;
  EXPECT_TRUE(wait_gone(read_pids(pids), 0.5).empty());
  std::filesystem::remove_all(dir);
}
INSTANTIATE_TEST_SUITE_P(IntTerm, LaunchSignal, ::testing::Values(SIGINT, SIGTERM));

// Slurm ends a cancelled or timed-out job by signalling the ranks, then their agent (or,
// in the batch step, hvdrun), each from slurmstepd: hvdrun or the agent may already be
// tearing down on a rank killed by it when its own SIGTERM comes. That one is said once,
// and not taken for a second interrupt: rank 1's SIGTERM handler (a checkpoint) runs to
// its end. It was SIGKILLed, and nothing said Slurm had ended the job. Here the ranks run
// under hvdrun itself, or under an agent (a launch command); a copy of bash named
// slurmstepd sends the signals and stays (hvdrun reads the sender's name from /proc).
class LaunchSlurmSignal : public ::testing::TestWithParam<bool> {};

TEST_P(LaunchSlurmSignal, DuringATeardownIsSaidOnceAndNotEscalated) {
  bool agent = GetParam();
  std::string dir = make_temp_dir();
  std::string stepd = dir + "/slurmstepd";
  std::filesystem::copy_file("/bin/bash", stepd);
  std::vector<std::unique_ptr<Process>> senders;
  auto slurm_kill = [&](pid_t pid) {
    senders.push_back(std::make_unique<Process>(
        std::vector<std::string>{stepd, "-c", "kill -TERM " + std::to_string(pid) + " && touch " + dir + "/sent; sleep 30"}));
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!std::filesystem::exists(dir + "/sent") && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    return std::filesystem::remove(dir + "/sent");
  };
  std::vector<std::string> args = {"-np", "2", "--kill-grace", "20"};
  if (agent) args.insert(args.end(), {"-H", "fakehost:2", "--launch-command", "sh -c \"exec \\\"\\$@\\\"\" {host}"});
  args.insert(args.end(), {"sh", "-c",
                           "echo $$ $PPID > " + dir + "/pid$HOROVOD_RANK; "
                           "if [ $HOROVOD_RANK = 1 ]; then trap 'touch " + dir + "/term; sleep 1; echo saved; exit 0' TERM; fi; "
                           "while :; do sleep 0.05; done"});
  Process p(hvd(args));
  ASSERT_TRUE(wait_for_lines(dir + "/pid0", 1, 30) && wait_for_lines(dir + "/pid1", 1, 30));
  std::istringstream ids(read_file(dir + "/pid0"));
  pid_t rank0, parent;
  ids >> rank0 >> parent;
  ASSERT_TRUE(slurm_kill(rank0));
  // hvdrun names rank 0 and sends SIGTERM to rank 1, whose handler starts.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!std::filesystem::exists(dir + "/term") && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_TRUE(std::filesystem::exists(dir + "/term"));
  // The ranks' parent (the agent, or hvdrun), twice (another node's agent, a second
  // scancel): only the agent hears it in the agent's case, and hvdrun must say it.
  ASSERT_TRUE(slurm_kill(parent));
  ASSERT_TRUE(slurm_kill(parent));
  auto o = p.wait(30);
  ASSERT_FALSE(o.timed_out);
  EXPECT_EQ(o.exit_code, 143) << o.err;
  EXPECT_NE(o.err.find("hvdrun: rank 0 (host " + std::string(agent ? "fakehost" : "localhost") +
                       ") was killed by signal 15 (SIGTERM)"),
            std::string::npos)
      << o.err;
  const std::string said =
      "hvdrun: received SIGTERM from Slurm (the job was cancelled or reached its time limit), terminating the job\n";
  size_t at = o.err.find(said);
  EXPECT_NE(at, std::string::npos) << o.err;
  EXPECT_EQ(o.err.find(said, at + 1), std::string::npos) << "said twice:\n" << o.err;
  EXPECT_NE(o.out.find("[1]<stdout>:saved\n"), std::string::npos) << "rank 1's SIGTERM handler was cut short\n" << o.err;
  std::filesystem::remove_all(dir);
}
INSTANTIATE_TEST_SUITE_P(HvdrunOrAgent, LaunchSlurmSignal, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? std::string("Agent") : std::string("Hvdrun"); });

TEST(Launch, SigkillOfHvdrunLeavesNoWorkerNorChild) {
  std::string dir = make_temp_dir();
  std::string pids = dir + "/pids";
  Process p(hvd({"-np", "4", "--kill-grace", "1", kWorker, "family", pids, "-1"}));
  ASSERT_TRUE(wait_for_lines(pids, 4, 20));
  p.signal(SIGKILL);
  auto o = p.wait(10);
  EXPECT_EQ(o.exit_code, 137);
  auto all = read_pids(pids);
  ASSERT_EQ(all.size(), 8u);
  EXPECT_TRUE(wait_gone(all, 10).empty()) << "workers outlived a SIGKILLed hvdrun";
  std::filesystem::remove_all(dir);
}

TEST(Launch, Sigusr1IsForwardedToWorkers) {
  std::string dir = make_temp_dir();
  std::string ready = dir + "/ready";
  Process p(hvd({"-np", "2", "sh", "-c",
                 "trap 'echo got usr1; exit 0' USR1; echo $$ >> " + ready + "; while :; do sleep 0.05; done"}));
  ASSERT_TRUE(wait_for_lines(ready, 2, 20));
  p.signal(SIGUSR1);
  auto o = p.wait(30);
  EXPECT_EQ(o.exit_code, 0) << o.err;
  EXPECT_NE(o.out.find("[0]<stdout>:got usr1"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("[1]<stdout>:got usr1"), std::string::npos) << o.out;
  std::filesystem::remove_all(dir);
}

// The state letter of /proc/PID/stat ('T' when stopped).
char proc_state(pid_t pid) {
  std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  size_t close = stat.rfind(')');
  return close == std::string::npos || close + 2 >= stat.size() ? '?' : stat[close + 2];
}

// Stopped: 'T', or 'D' waiting in vfork() for a child that is itself stopped (dash runs
// `sleep` through vfork; the group's SIGTSTP can stop the child before its exec, and the
// parent then waits in 'D' until SIGCONT).
bool stopped_or_held_by_stopped_child(pid_t pid) {
  char s = proc_state(pid);
  if (s == 'T') return true;
  if (s != 'D') return false;
  std::string kids = read_file("/proc/" + std::to_string(pid) + "/task/" + std::to_string(pid) + "/children");
  std::istringstream in(kids);
  bool any = false;
  for (pid_t k; in >> k;) {
    if (proc_state(k) != 'T') return false;
    any = true;
  }
  return any;
}

// Two ranks (placed by `placement`) each print their pid and loop for 2 s: Ctrl-Z must
// stop both and hvdrun, SIGCONT (`hold` seconds later) resume them to a clean end.
void expect_ctrl_z_stops_and_resumes(const std::vector<std::string>& placement, double hold = 0,
                                     const std::map<std::string, std::string>& env = {}) {
  std::string dir = make_temp_dir();
  std::string pids = dir + "/pids";
  std::vector<std::string> args{"-np", "2"};
  args.insert(args.end(), placement.begin(), placement.end());
  for (const char* a : {"sh", "-c"}) args.push_back(a);
  args.push_back("echo $$ >> " + pids + "; i=0; while [ $i -lt 40 ]; do sleep 0.05; i=$((i+1)); done; echo done");
  Process p(hvd(args), env);
  ASSERT_TRUE(wait_for_lines(pids, 2, 20));
  auto workers = read_pids(pids);
  p.signal(SIGTSTP);
  bool stopped = false;
  // Up to 10 s: on a loaded machine a worker can sit in 'D' (a page fault, an exec) for a
  // while before the stop takes.
  for (int i = 0; i < 1000 && !stopped; ++i) {
    stopped = stopped_or_held_by_stopped_child(workers[0]) && stopped_or_held_by_stopped_child(workers[1]) &&
              proc_state(p.pid()) == 'T';
    usleep(10000);
  }
  EXPECT_TRUE(stopped) << "hvdrun " << proc_state(p.pid()) << ", workers " << proc_state(workers[0])
                       << proc_state(workers[1]);
  std::this_thread::sleep_for(std::chrono::duration<double>(hold));
  p.signal(SIGCONT);
  auto o = p.wait(60);
  EXPECT_EQ(o.exit_code, 0) << o.err;
  EXPECT_NE(o.out.find("[0]<stdout>:done"), std::string::npos);
  EXPECT_NE(o.out.find("[1]<stdout>:done"), std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST(Launch, CtrlZStopsTheWorkersAndContinueResumesThem) { expect_ctrl_z_stops_and_resumes({}); }

// Ctrl-Z stops the ranks of other hosts too (the "remote" host runs its agent here through
// a launch command). The SIGSTOP for them waited on the relay thread, which hvdrun's own
// stop stopped first: it left only on the SIGCONT, right before that SIGCONT, and the
// remote rank never stopped.
TEST(Launch, CtrlZStopsRemoteWorkersToo) {
  expect_ctrl_z_stops_and_resumes({"-H", "localhost:1,fakehost:1", "--launch-command", "sh -c \"exec \\\"\\$@\\\"\" {host}"});
}

// A Ctrl-Z held past the heartbeat time-out: hvdrun told the agent it was stopping (the
// SIGSTOP it relays), and neither side takes the other's silence over the stop for a lost
// contact. After fg the job ran on no more: the agent had ended its rank, and hvdrun exited
// 5 ("lost contact"), where a local job, or one under mpirun or srun, resumes.
TEST(Launch, CtrlZHeldPastTheHeartbeatTimeoutResumesRemoteWorkers) {
  expect_ctrl_z_stops_and_resumes({"-H", "localhost:1,fakehost:1", "--launch-command", "sh -c \"exec \\\"\\$@\\\"\" {host}"},
                                  /*hold=*/5, {{"HVDRUN_HEARTBEAT_TIMEOUT", "3"}});
}

// The kill grace holds on a remote host where a rank failed: its agent began the teardown
// there, and hvdrun's own teardown SIGTERM, relayed a moment later, was taken for a second
// interrupt (SIGKILL at once): rank 0's SIGTERM handler never finished. Locally it does.
TEST(Launch, KillGraceHoldsOnTheRemoteHostWhereARankFailed) {
  std::string script = "if [ $RANK = 1 ]; then sleep 0.5; exit 3; fi; trap 'sleep 1; echo cleaned up; exit 0' TERM; "
                       "while :; do sleep 0.05; done";
  auto o = run(hvd({"-np", "2", "-H", "fakehost:2", "--kill-grace", "5", "--launch-command",
                    "sh -c \"exec \\\"\\$@\\\"\" {host}", "sh", "-c", script}),
               60);
  ASSERT_FALSE(o.timed_out);
  EXPECT_EQ(o.exit_code, 3) << o.err;
  EXPECT_NE(o.out.find("[0]<stdout>:cleaned up"), std::string::npos) << o.out << o.err;
}

TEST(Launch, SixtyFourLocalWorkers) {
  auto o = run(hvd({"-np", "64", "sh", "-c", "echo $RANK $LOCAL_RANK $WORLD_SIZE"}), 60);
  ASSERT_EQ(o.exit_code, 0) << o.err;
  auto lines = split_lines(o.out);
  ASSERT_EQ(lines.size(), 64u);
  std::set<std::string> got(lines.begin(), lines.end());
  for (int r = 0; r < 64; ++r) {
    std::string rs = std::to_string(r);
    EXPECT_TRUE(got.count("[" + rs + "]<stdout>:" + rs + " " + rs + " 64")) << r;
  }
}

TEST(Launch, RaisesTheOpenFileLimitForManyWorkers) {
  // 40 workers need 80 pipe ends: more than a soft limit of 64 allows, fine under the hard one.
  auto o = run({"sh", "-c", "ulimit -Sn 64 && exec " + kHvdrun + " -np 40 true"}, 60);
  EXPECT_EQ(o.exit_code, 0) << o.err;
}

TEST(Launch, ExitCodes) {
  EXPECT_EQ(run(hvd({"-np", "2", "true"})).exit_code, 0);
  EXPECT_EQ(run(hvd({"-np", "2", "sh", "-c", "exit $((RANK + 3))"})).exit_code, 3);
  auto nf = run(hvd({"-np", "2", "no-such-program-hvdrun"}));
  EXPECT_EQ(nf.exit_code, 127);
  EXPECT_EQ(nf.err, "hvdrun: no-such-program-hvdrun: command not found\n");
  std::string dir = make_temp_dir();
  std::ofstream(dir + "/plain") << "echo hi\n";
  chmod((dir + "/plain").c_str(), 0644);
  auto nx = run(hvd({"-np", "1", dir + "/plain"}));
  EXPECT_EQ(nx.exit_code, 126);
  EXPECT_EQ(nx.err, "hvdrun: " + dir + "/plain: permission denied\n");
  auto isdir = run(hvd({"-np", "1", dir}));
  EXPECT_EQ(isdir.exit_code, 126);
  EXPECT_EQ(isdir.err, "hvdrun: " + dir + ": is a directory\n");
  std::filesystem::remove_all(dir);
  auto usage = run(hvd({"-np", "2", "-H", "a:1", "true"}));
  EXPECT_EQ(usage.exit_code, 2);
  EXPECT_EQ(usage.err, "hvdrun: requested more processes (2) than there are available slots (1)\n");
  EXPECT_EQ(usage.out, "");
  auto remote = run(hvd({"-H", "unresolvable-host-x:1", "true"}));
  EXPECT_EQ(remote.exit_code, 3);
  EXPECT_NE(remote.err.find("hvdrun: unresolvable-host-x:22: cannot resolve the host name"), std::string::npos)
      << remote.err;
}

TEST(Launch, BadInputIsOneLineAndLaunchesNothing) {
  std::string dir = make_temp_dir();
  std::string marker = dir + "/ran";
  std::string hf = dir + "/hosts";
  std::ofstream(hf) << "localhost slots=2\nlocalhost gpus=2\n";
  std::vector<std::vector<std::string>> bad = {
      {"-np", "two", "touch", marker},       {"-H", "localhost:x", "touch", marker},
      {"--hostfile", hf, "touch", marker},   {"-np", "1", "--kill-grace", "-1", "touch", marker},
      {"-np", "1", "-x", "1BAD", "touch", marker}, {"--frobnicate", "touch", marker},
      {"-np", "1"},
  };
  for (const auto& args : bad) {
    auto o = run(hvd(args), 30);
    EXPECT_EQ(o.exit_code, 2) << args[0];
    auto lines = split_lines(o.err);
    ASSERT_EQ(lines.size(), 1u) << o.err;
    EXPECT_EQ(lines[0].rfind("hvdrun: ", 0), 0u) << o.err;
    EXPECT_EQ(o.out, "");
  }
  EXPECT_FALSE(std::filesystem::exists(marker));
  auto o = run(hvd({"--hostfile", hf, "true"}), 30);
  EXPECT_EQ(o.err, "hvdrun: " + hf + ":2: unexpected token 'gpus=2'; expected 'host slots=N', 'host:N' or 'host'\n");
  std::filesystem::remove_all(dir);
}

TEST(Launch, DryRunPrintsThePlanWithUnresolvableHosts) {
  auto o = run(hvd({"--dry-run", "-H", "no-such-host-1:2,[::1]:1", "python3", "train.py", "--epochs", "1"}), 30);
  ASSERT_EQ(o.exit_code, 0) << o.err;
  auto lines = split_lines(o.out);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0],
            R"({"rank":0,"size":3,"local_rank":0,"local_size":2,"cross_rank":0,"cross_size":2,"host":"no-such-host-1","argv":["python3","train.py","--epochs","1"]})");
  EXPECT_EQ(lines[2],
            R"({"rank":2,"size":3,"local_rank":0,"local_size":1,"cross_rank":1,"cross_size":2,"host":"::1","argv":["python3","train.py","--epochs","1"]})");
}

TEST(Launch, PyTorchDdpJobRunsUnchanged) {
  if (run({"/usr/bin/python3", "-c", "import torch.distributed"}, 120).exit_code != 0)
    GTEST_SKIP() << "Debian's python3-torch is not installed for /usr/bin/python3";
  std::string script = std::string(TEST_SOURCE_DIR) + "/integration/ddp_train.py";
  auto o = run(hvd({"-np", "3", "/usr/bin/python3", script}), 240);
  ASSERT_FALSE(o.timed_out);
  ASSERT_EQ(o.exit_code, 0) << o.err.substr(0, 3000);
  for (int r = 0; r < 3; ++r)
    EXPECT_NE(o.out.find("[" + std::to_string(r) + "]<stdout>:rank " + std::to_string(r) + "/3 ok"), std::string::npos)
        << o.out;
}

// Issue 16.6: the descriptor budget is checked before anything starts (exit 3, one line).
TEST(Launch, NpOverTheDescriptorBudgetIsRefusedBeforeAnythingStarts) {
  std::string dir = make_temp_dir();
  std::string marker = dir + "/started";
  auto o = run({"sh", "-c", "ulimit -n 256 && exec " + kHvdrun + " -np 200 sh -c 'echo x >> " + marker + "; sleep 5'"},
               60);
  EXPECT_EQ(o.exit_code, 3) << o.err;
  auto lines = split_lines(o.err);
  ASSERT_EQ(lines.size(), 1u) << o.err;
  EXPECT_EQ(lines[0].rfind("hvdrun: 200 ranks need about 6", 0), 0u) << o.err;
  EXPECT_NE(lines[0].find(" open files in hvdrun, over its limit of 256 (RLIMIT_NOFILE, 'ulimit -n')"),
            std::string::npos)
      << o.err;
  EXPECT_FALSE(std::filesystem::exists(marker)) << "workers were started";
  std::filesystem::remove_all(dir);
}

// Issues 16.10, 16.11, 16.14 through the real binary: one line, exit 2, nothing run.
TEST(Launch, HostListsAndHostFilesPastTheirBounds) {
  std::string dir = make_temp_dir();
  std::string many;
  for (int i = 0; i < 2100; ++i) many += (i ? ",h" : "h") + std::to_string(i) + ":1048576";
  std::string bom = dir + "/bom";
  std::ofstream(bom) << "\xEF\xBB\xBFlocalhost slots=2\r\n";
  struct Case {
    std::vector<std::string> args;
    std::string err;
  } cases[] = {
      {{"--dry-run", "-H", many, "true"},
       "hvdrun: the hosts have 2202009600 slots in all, more than the 1048576 ranks one job may have; give -np\n"},
      {{"--hostfile", "/dev/zero", "true"},
       "hvdrun: host file '/dev/zero': is a character device; expected a regular file\n"},
      {{"--hostfile", dir, "true"}, "hvdrun: host file '" + dir + "': is a directory; expected a regular file\n"},
      {{"--hosts=-oProxyCommand:1", "true"},
       "hvdrun: host list '-oProxyCommand:1': host '-oProxyCommand' starts with '-'; expected a host name or "
       "address, not an option\n"},
  };
  for (const auto& c : cases) {  // refused before anything is read or run (the message says which check)
    auto o = run(hvd(c.args), 30);
    ASSERT_FALSE(o.timed_out) << c.args[1];
    EXPECT_EQ(o.exit_code, 2) << o.err;
    EXPECT_EQ(o.err, c.err);
    EXPECT_EQ(o.out, "");
  }
  auto o = run(hvd({"--dry-run", "--hostfile", bom, "true"}), 30);
  EXPECT_EQ(o.exit_code, 0) << o.err;
  EXPECT_EQ(split_lines(o.out).size(), 2u);
  std::filesystem::remove_all(dir);
}

// Issue 16.12: `hvdrun ... | head -1` ran the job to its end and exited 0 once head had
// gone. Now the job ends at the first write that finds no reader, with status 141 (SIGPIPE)
// and not a word on stderr, and no worker is left.
TEST(Launch, ClosedStdoutEndsTheJobWith141) {
  std::string dir = make_temp_dir();
  std::string pids = dir + "/pids";
  auto o = run({"bash", "-c",
                kHvdrun + " -np 2 sh -c 'echo $$ >> " + pids +
                    "; while :; do echo line; done' 2>" + dir + "/err | head -1; echo \"rc=${PIPESTATUS[0]}\""},
               60);
  ASSERT_FALSE(o.timed_out) << "hvdrun kept the job running after its reader left";
  auto lines = split_lines(o.out);  // the first line of rank 0 or 1, then the status
  ASSERT_EQ(lines.size(), 2u) << o.out;
  EXPECT_TRUE(lines[0] == "[0]<stdout>:line" || lines[0] == "[1]<stdout>:line") << lines[0];
  EXPECT_EQ(lines[1], "rc=141");
  EXPECT_EQ(read_file(dir + "/err"), "");
  EXPECT_TRUE(wait_gone(read_pids(pids), 10).empty());
  // A job that would end by itself ends early the same way.
  auto seq = run({"bash", "-c", kHvdrun + " -np 1 sh -c 'seq 1000000; sleep 30' | head -1; echo \"rc=${PIPESTATUS[0]}\""},
                 60);
  ASSERT_FALSE(seq.timed_out);
  EXPECT_EQ(seq.out, "[0]<stdout>:1\nrc=141\n");
  // The reader leaves once the job has ended but before hvdrun has written its output
  // (the worker's 14 MB wait in hvdrun while the reader sleeps): 141 too, not 0.
  auto late = run({"bash", "-c", kHvdrun + " -np 1 seq 2000000 | (sleep 1; head -c 3); echo \"rc=${PIPESTATUS[0]}\""}, 60);
  ASSERT_FALSE(late.timed_out);
  EXPECT_EQ(late.out, "[0]rc=141\n");
  std::filesystem::remove_all(dir);
}

// --launcher slurm with a stand-in srun on PATH (it runs the agent here, as one task on
// node n1, and prints lines of its own and labelled lines of task 0 on stderr, as srun
// does): hvdrun shows each line once, whole and in order. srun's own lines were kept
// apart from task 0's and joined on each look, so one of srun's after one of task 0's
// moved task 0's text under what had been shown: hvdrun printed ": three" and "two" again
// in place of "srun: three".
TEST(Launch, SrunsOwnLinesAndItsTasksLinesAreRelayedOnceInOrder) {
  std::string dir = make_temp_dir();
  std::string srun = dir + "/srun";
  {
    std::ofstream f(srun);
    f << "#!/bin/sh\n"
         "while [ \"$1\" != -- ]; do case $1 in --nodelist=*) node=${1#--nodelist=};; esac; shift; done; shift\n"
         "(echo 'srun: one' >&2; sleep 0.3; echo '0: two' >&2; sleep 0.3; echo 'srun: three' >&2; sleep 0.3;\n"
         " echo '0: four' >&2; touch " << dir << "/said) &\n"
         "SLURMD_NODENAME=$node SLURM_PROCID=0 exec \"$@\"\n";
  }
  chmod(srun.c_str(), 0755);
  // The rank ends once everything was said (the deadline is the test's).
  auto o = run(hvd({"-np", "1", "-H", "n1:1", "--launcher", "slurm", "sh", "-c",
                    "while [ ! -e " + dir + "/said ]; do sleep 0.05; done; sleep 0.2"}),
               60, {{"PATH", dir + ":" + std::getenv("PATH")}, {"SLURM_JOB_ID", "1"}});
  ASSERT_FALSE(o.timed_out);
  EXPECT_EQ(o.exit_code, 0) << o.err;
  std::vector<std::string> relayed;
  for (const auto& line : split_lines(o.err))
    if (line.rfind("hvdrun: n1: ", 0) == 0) relayed.push_back(line.substr(12));
  EXPECT_EQ(relayed, (std::vector<std::string>{"srun: one", "two", "srun: three", "four"})) << o.err;
  std::filesystem::remove_all(dir);
}

// A launch command, or the remote shell of an SSH client, that prints text on stdout (a
// greeting, a login banner, a ~/.bashrc that echoes) before it starts the agent, or instead
// of starting it: hvdrun read the text as a frame header and said only "agent frame of
// 1466264675 bytes". It now quotes the text (exit 3, as any host that does not start), and
// the agent that was started after the text does not outlive hvdrun. The launchers are
// shell scripts here, the "remote" host this machine.
TEST(Launch, TextPrintedBeforeTheAgentIsQuotedNotTakenForAFrame) {
  std::string dir = make_temp_dir();
  auto script = [&](const std::string& name, const std::string& body) {
    std::string path = dir + "/" + name;
    std::ofstream(path) << "#!/bin/sh\n" << body;
    chmod(path.c_str(), 0755);
    return path;
  };
  struct Case {
    std::vector<std::string> launcher;
    std::string said;
  };
  const std::string by_command = "hvdrun: fakehost: the launch command printed text on stdout before the agent started: ";
  Case cases[] = {
      // Greets, then starts the agent.
      {{"--launch-command", script("greets", "echo $$ > " + dir + "/agent\necho \"Welcome to $1\"\nshift\nexec \"$@\"\n") + " {host}"},
       by_command + "'Welcome to fakehost\\x0a'"},
      // Says why it cannot, on stdout, and exits 1.
      {{"--launch-command", script("fails", "echo \"error: pod $1 not found\"\nexit 1\n") + " {host}"},
       by_command + "'error: pod fakehost not found\\x0a'"},
      // Fewer bytes than a frame's header, then the end of the stream.
      {{"--launch-command", script("brief", "echo hi\nexit 1\n") + " {host}"}, by_command + "'hi\\x0a'"},
      // An OpenSSH-style client whose remote shell greets, then runs the agent.
      {{"--ssh-command", script("ssh", "while [ \"$1\" != -- ]; do shift; done\necho \"Last login: $2\"\nexec sh -c \"$3\"\n")},
       "hvdrun: fakehost: the remote shell printed text on stdout before the agent started: 'Last login: fakehost\\x0a'"},
  };
  for (const auto& c : cases) {
    std::vector<std::string> args = {"-np", "1", "-H", "fakehost:1"};
    args.insert(args.end(), c.launcher.begin(), c.launcher.end());
    args.insert(args.end(), {"echo", "ran"});
    auto o = run(hvd(args), 60);
    ASSERT_FALSE(o.timed_out) << c.said;
    EXPECT_EQ(o.exit_code, 3) << o.err;
    EXPECT_NE(o.err.find(c.said), std::string::npos) << o.err;
    EXPECT_EQ(o.err.find("agent frame of"), std::string::npos) << o.err;
    EXPECT_EQ(o.out.find("ran"), std::string::npos) << o.out;
  }
  ASSERT_TRUE(wait_for_lines(dir + "/agent", 1, 1));
  EXPECT_TRUE(wait_gone({std::stoi(read_file(dir + "/agent"))}, 10).empty()) << "the agent started after the text outlived hvdrun";
  std::filesystem::remove_all(dir);
}
