// hvdrun's rendezvous with real libhvdrun workers.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "process.h"

using namespace testing_hvdrun;

namespace {
const std::string kHvdrun = HVDRUN_BIN;
const std::string kInit = INIT_WORKER_BIN;
}  // namespace

TEST(RendezvousLaunch, EveryRankLearnsItsViewThroughHvdInit) {
  auto o = run({kHvdrun, "-np", "4", "-H", "localhost:2,127.0.0.1:2", kInit}, 60);
  ASSERT_EQ(o.exit_code, 0) << o.err;
  auto lines = split_lines(o.out);
  std::set<std::string> got(lines.begin(), lines.end());
  EXPECT_EQ(got, (std::set<std::string>{
                     "[0]<stdout>:rank=0 size=4 local_rank=0 local_size=2 cross_rank=0 cross_size=2",
                     "[1]<stdout>:rank=1 size=4 local_rank=1 local_size=2 cross_rank=0 cross_size=2",
                     "[2]<stdout>:rank=2 size=4 local_rank=0 local_size=2 cross_rank=1 cross_size=2",
                     "[3]<stdout>:rank=3 size=4 local_rank=1 local_size=2 cross_rank=1 cross_size=2"}));
}

TEST(RendezvousLaunch, InitTwiceIsHarmlessAndWithoutHvdrunIsAJobOfOne) {
  auto o = run({kHvdrun, "-np", "2", kInit, "twice"}, 60);
  EXPECT_EQ(o.exit_code, 0) << o.err;
  auto alone = run({kInit}, 30);
  EXPECT_EQ(alone.exit_code, 0) << alone.err;
  EXPECT_EQ(alone.out, "rank=0 size=1 local_rank=0 local_size=1 cross_rank=0 cross_size=1\n");
}

TEST(RendezvousLaunch, StartTimeoutNamesTheMissingRankAndTearsDown) {
  auto o = run({kHvdrun, "-np", "3", "--start-timeout", "1", "--kill-grace", "1", kInit, "skip", "1"}, 60);
  ASSERT_FALSE(o.timed_out);
  EXPECT_EQ(o.exit_code, 4);
  EXPECT_NE(o.err.find("hvdrun: rank 1 (host localhost, local rank 1) did not reach the rendezvous at 127.0.0.1:"),
            std::string::npos)
      << o.err;
  EXPECT_NE(o.err.find(" within 1 s"), std::string::npos);
  EXPECT_EQ(o.err.find("rank 0 (host"), std::string::npos) << "rank 0 registered and must not be named";
}

TEST(RendezvousLaunch, RefusedConnectionIsLoggedAsAWholeLine) {
  // A worker that speaks garbage to the rendezvous: hvdrun refuses and logs it, in its own
  // line among the workers' output.
  auto o = run({kHvdrun, "-np", "1", "bash", "-c",
                "echo before >&2; exec 3<>/dev/tcp/$HVDRUN_RENDEZVOUS_ADDR/$HVDRUN_RENDEZVOUS_PORT; "
                "printf 'GET / HTTP/1.0\\r\\n\\r\\n' >&3; cat <&3 >/dev/null; echo after >&2"},
               60);
  EXPECT_EQ(o.exit_code, 0) << o.err;
  // The log line is whole; where it falls among the worker's lines is a race between the
  // rendezvous thread and the pipe reader, so only the worker's own order is asserted.
  auto lines = split_lines(o.err);
  ASSERT_EQ(lines.size(), 3u) << o.err;
  std::vector<std::string> worker;
  int logged = 0;
  for (const auto& l : lines) {
    if (l.rfind("hvdrun: [warning] rendezvous: refused connection from 127.0.0.1:", 0) == 0) ++logged;
    else worker.push_back(l);
  }
  EXPECT_EQ(logged, 1) << o.err;
  EXPECT_EQ(worker, (std::vector<std::string>{"[0]<stderr>:before", "[0]<stderr>:after"})) << o.err;
}

TEST(RendezvousLaunch, WrongSecretIsAClearErrorFromHvdInit) {
  std::string zeros(64, '0');
  auto o = run({kHvdrun, "-np", "1", "sh", "-c", "HVDRUN_SECRET=" + zeros + " exec " + kInit}, 60);
  EXPECT_EQ(o.exit_code, 10 + 4);  // HVD_ERR_AUTH
  EXPECT_NE(o.err.find("the server failed authentication (wrong HVDRUN_SECRET"), std::string::npos) << o.err;
}

TEST(RendezvousLaunch, SecretIsInTheEnvironmentNotOnCommandLines) {
  // The worker looks at every command line on the machine for its own secret.
  std::string dir = make_temp_dir();
  auto o = run({kHvdrun, "-np", "1", "sh", "-c",
                "printf %s \"$HVDRUN_SECRET\" > " + dir + "/s; test ${#HVDRUN_SECRET} = 64 || exit 9; "
                "for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f 2>/dev/null; echo; done | grep -c -F -f " + dir + "/s"},
               60);
  std::filesystem::remove_all(dir);
  EXPECT_EQ(o.exit_code, 1) << o.out << o.err;  // grep -c found nothing (exit 1), printed 0
  EXPECT_EQ(o.out, "[0]<stdout>:0\n");
}
