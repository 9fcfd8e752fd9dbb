// The real hvdrun binary with real workers: the first failure tears the job down, signals
// are forwarded and reported as exit codes, Ctrl-Z stops and resumes, the kill grace holds.
#include "launch_test_util.h"

using namespace testing_hvdrun;
using namespace launch_test;

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

// --max-restarts (torchrun's): every worker starts again after a failure, told which restart.
TEST(Launch, MaxRestartsStartsEveryWorkerAgainUntilItSucceeds) {
  // Rank 1 fails the first time only.
  auto o = run(hvd({"-np", "2", "--max-restarts", "2", "sh", "-c",
                    "echo run $RANK $HVDRUN_RESTART_COUNT $TORCHELASTIC_RESTART_COUNT $TORCHELASTIC_MAX_RESTARTS; "
                    "[ $RANK = 1 ] && [ $HVDRUN_RESTART_COUNT = 0 ] && exit 3; exit 0"}),
               60);
  ASSERT_FALSE(o.timed_out);
  EXPECT_EQ(o.exit_code, 0) << o.err;
  for (const char* line : {"[0]<stdout>:run 0 0 0 2\n", "[1]<stdout>:run 1 0 0 2\n", "[0]<stdout>:run 0 1 1 2\n",
                           "[1]<stdout>:run 1 1 1 2\n"})
    EXPECT_NE(o.out.find(line), std::string::npos) << line << o.out;
  EXPECT_EQ(o.out.find(" 2 2 2\n"), std::string::npos) << o.out;  // no second restart
  EXPECT_NE(o.err.find("hvdrun: restart 1 of 2: the job failed (exit code 3); every worker starts again with "
                       "HVDRUN_RESTART_COUNT=1\n"),
            std::string::npos)
      << o.err;
}

TEST(Launch, MaxRestartsUsedUpEndsWithTheLastFailure) {
  auto o = run(hvd({"-np", "1", "--max-restarts", "2", "sh", "-c", "echo run $HVDRUN_RESTART_COUNT; exit 5"}), 60);
  ASSERT_FALSE(o.timed_out);
  EXPECT_EQ(o.exit_code, 5) << o.err;
  EXPECT_EQ(split_lines(o.out).size(), 3u) << o.out;  // the first run and two restarts
  EXPECT_NE(o.err.find("restart 2 of 2"), std::string::npos) << o.err;
  EXPECT_EQ(o.err.find("restart 3"), std::string::npos) << o.err;
  // A job that never started its workers is not restarted.
  auto bad = run(hvd({"-np", "1", "--max-restarts", "2", "/nonexistent/prog"}), 60);
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_EQ(bad.err.find("restart"), std::string::npos) << bad.err;
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
// slurmstepd sends the signals and stays, under that name, for the rest of the test
// (hvdrun reads the sender's name from /proc when it handles the signal: a sender that
// had exec'd `sleep` by then, as bash does with the last command of `-c`, was taken for
// the user's second interrupt, and the ranks were SIGKILLed: 1 run in 4).
class LaunchSlurmSignal : public ::testing::TestWithParam<bool> {};

TEST_P(LaunchSlurmSignal, DuringATeardownIsSaidOnceAndNotEscalated) {
  bool agent = GetParam();
  std::string dir = make_temp_dir();
  std::string stepd = dir + "/slurmstepd";
  std::filesystem::copy_file("/bin/bash", stepd);
  std::filesystem::create_directory(dir + "/stay");
  std::filesystem::copy_file("/bin/sleep", dir + "/stay/slurmstepd");  // sleeps under the same name
  std::vector<std::unique_ptr<Process>> senders;
  auto slurm_kill = [&](pid_t pid) {
    senders.push_back(std::make_unique<Process>(
        std::vector<std::string>{stepd, "-c", "kill -TERM " + std::to_string(pid) + " && touch " + dir + "/sent; exec " + dir +
                                     "/stay/slurmstepd 30"}));
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
