// The pre-flight table (launcher/preflight_table.cc): a row per host, cells marked.
#include <gtest/gtest.h>

#include "launcher/preflight.h"

namespace hvdrun {
namespace {

PreflightHost host(const std::string& name) {
  PreflightHost h;
  h.host = name;
  h.slots = 2;
  h.facts.version = "1.2.0";
  h.facts.protocol = 1;
  h.facts.build = "tcp shm";
  h.facts.ifaces = {{"eth0", true}, {"lo", true}};
  h.addrs = {{"eth0", "10.0.0.1", false, 24}};
  h.facts.shm_free = 3ll << 30;
  h.facts.nofile = 4096;
  h.facts.nproc = -1;
  return h;
}

TEST(PreflightTable, RowPerHostWithMarkedCellsAndAKey) {
  auto a = host("a"), b = host("bee");
  a.facts.gpus = {{"H100", "0000:19:00.0", 0}, {"H100", "0000:9a:00.0", 1}};
  a.facts.gpu_driver = "535.1";
  a.has_python = b.has_python = true;
  a.python = {"3.11.2", "2.1.0", "12.1", ""};
  b.python = {"3.10.1", "", "", ""};
  b.facts.ifaces = {{"lo", true}};
  b.clock_offset = -0.25;
  PreflightJob job;
  job.version = "1.2.0";
  job.protocol = 1;
  job.ifaces = {{"NCCL_SOCKET_IFNAME", "eth0"}};
  std::string t = preflight_table({a, b}, job, check_preflight({a, b}, job));
  EXPECT_EQ(t,
            "host  ranks  hvdrun  build    gpus                        ifaces            python                     shm   limits                 clock\n"
            "a     2      1.2.0   tcp shm  2x H100 drv 535.1 numa 0,1  eth0:up:10.0.0.1  3.11.2 torch-2.1.0-cu12.1  3.0G  nofile 4096 nproc unl  +0.000s\n"
            "bee   2      1.2.0   tcp shm  -                           eth0:missing!     3.10.1 no-torch*           3.0G  nofile 4096 nproc unl  -0.250s\n"
            "(! an error: the job cannot run so; * a difference to look at)\n");
}

TEST(PreflightTable, NoKeyWhenNothingIsMarked) {
  PreflightJob job;
  job.version = "1.2.0";
  job.protocol = 1;
  std::string t = preflight_table({host("a")}, job, {});
  EXPECT_EQ(t.find("(!"), std::string::npos) << t;
  EXPECT_NE(t.find("a     2      1.2.0   tcp shm  -     -       -       3.0G  nofile 4096 nproc unl  +0.000s"), std::string::npos) << t;
}

}  // namespace
}  // namespace hvdrun
