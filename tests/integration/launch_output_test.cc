// The real hvdrun binary with real workers: every output line tagged, whole and in order,
// under load, slow readers, per-rank files, a closed stdout, srun's own lines.
#include "launch_test_util.h"

using namespace testing_hvdrun;
using namespace launch_test;

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
