// Issue 16 (the launcher half): the user's settings win, daemons of a rank end with the
// job, the rank that left first is blamed, stopped ranks are resumed before the teardown.
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "process.h"

using namespace testing_hvdrun;

namespace {

const std::string kHvdrun = HVDRUN_BIN;

std::vector<std::string> hvd(std::vector<std::string> args) {
  args.insert(args.begin(), kHvdrun);
  return args;
}

}  // namespace

// -x > the user's environment > hvdrun's defaults: hvdrun knows an interface (lo), yet the
// user's NCCL_SOCKET_IFNAME (-x) and GLOO_SOCKET_IFNAME (exported) reach the workers.
TEST(Hardening, UserEnvironmentAndDashXWinOverDefaults) {
  auto o = run(hvd({"-np", "1", "--network-interface", "lo", "-x", "NCCL_SOCKET_IFNAME=ib0", "sh", "-c",
                    "echo $NCCL_SOCKET_IFNAME $GLOO_SOCKET_IFNAME $HVDRUN_IFACE"}),
               30, {{"GLOO_SOCKET_IFNAME", "ib1"}, {"NCCL_SOCKET_IFNAME", "env0"}});
  ASSERT_EQ(o.exit_code, 0) << o.err;
  EXPECT_NE(o.out.find("[0]<stdout>:ib0 ib1 lo\n"), std::string::npos) << o.out;
  // Without the user's settings, hvdrun's defaults.
  auto d = run(hvd({"-np", "1", "--network-interface", "lo", "sh", "-c", "echo $NCCL_SOCKET_IFNAME $GLOO_SOCKET_IFNAME"}),
               30);
  ASSERT_EQ(d.exit_code, 0) << d.err;
  EXPECT_NE(d.out.find("[0]<stdout>:lo lo\n"), std::string::npos) << d.out;
}
