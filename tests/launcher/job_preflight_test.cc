// The job's side of the pre-flight check (launcher/job_preflight.cc): what the job asks of
// the hosts, and this machine's row.
#include "launcher/job_preflight.h"

#include <gtest/gtest.h>

#include "hvdrun_version.h"
#include "launcher/agent_wire.h"

namespace hvdrun {
namespace {

std::vector<std::pair<std::string, std::string>> named(const PreflightJob& j) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& i : j.ifaces) out.push_back({i.origin, i.value});
  return out;
}

TEST(JobPreflight, TheInterfacesTheWorkersAreToldToUse) {
  using Named = std::vector<std::pair<std::string, std::string>>;
  auto none = preflight_job({{"PATH", "/bin"}}, {}, "");
  EXPECT_EQ(none.version, HVDRUN_VERSION_STRING);
  EXPECT_EQ(none.protocol, agentwire::kProtocol);
  EXPECT_EQ(named(none), Named{});
  // hvdrun's environment, then -x (the last wins), then --network-interface first.
  auto j = preflight_job({{"NCCL_SOCKET_IFNAME", "ib"}, {"GLOO_SOCKET_IFNAME", "eth9"}},
                         {{"GLOO_SOCKET_IFNAME", "eth1"}, {"GLOO_SOCKET_IFNAME", "eth0"}}, "ib0");
  EXPECT_EQ(named(j), (Named{{"--network-interface", "ib0"}, {"NCCL_SOCKET_IFNAME", "ib"}, {"GLOO_SOCKET_IFNAME", "eth0"}}));
  // -x NAME= (empty) names nothing.
  EXPECT_EQ(named(preflight_job({{"NCCL_SOCKET_IFNAME", "ib"}}, {{"NCCL_SOCKET_IFNAME", ""}}, "")), Named{});
}

TEST(JobPreflight, ThisMachinesRowHasItsSlotsAndFacts) {
  std::vector<RankInfo> ranks(3);
  ranks[0].host = ranks[2].host = "localhost";
  ranks[1].host = "127.0.0.1";
  auto hosts = preflight_hosts_of(ranks, {}, {});
  ASSERT_EQ(hosts.size(), 2u);
  EXPECT_EQ(hosts[0].host, "localhost");
  EXPECT_EQ(hosts[0].slots, 2);
  EXPECT_EQ(hosts[1].slots, 1);
  EXPECT_EQ(hosts[0].facts.version, HVDRUN_VERSION_STRING);
  EXPECT_FALSE(hosts[0].facts.ifaces.empty());  // lo at least
  EXPECT_EQ(hosts[0].clock_offset, 0);
  EXPECT_TRUE(preflight_passes(check_preflight(hosts, preflight_job({}, {}, ""))));
}

PreflightHost python_host(const std::string& name) {
  PreflightHost h;
  h.host = name;
  h.slots = 1;
  h.facts.version = HVDRUN_VERSION_STRING;
  h.facts.protocol = agentwire::kProtocol;
  return h;
}

// The facts a running job's hosts send: checked once all came, said once; at the end with
// those that came.
TEST(JobPreflight, LatePythonFactsAreWarnedAboutOnceWhenTheLastCame) {
  std::vector<std::string> said;
  auto job = preflight_job({}, {}, "");
  LatePythonCheck check({python_host("a"), python_host("b"), python_host("c")}, job,
                        [&said](const std::string& line) { said.push_back(line); });
  check.arrived("a", {"3.11.2", "2.1.0", "12.1", ""});
  check.arrived("b", {"3.10.1", "2.1.0", "12.1", ""});
  EXPECT_TRUE(said.empty()) << "said before every host's facts came";
  check.arrived("c", {"3.11.2", "2.1.0", "12.1", ""});
  ASSERT_EQ(said.size(), 1u);
  EXPECT_NE(said[0].find("b"), std::string::npos) << said[0];
  EXPECT_NE(said[0].find("3.10.1"), std::string::npos) << said[0];
  check.arrived("c", {"3.9.0", "", "", ""});  // (a host's facts count once)
  check.finish();
  EXPECT_EQ(said.size(), 1u);

  std::vector<std::string> partial;
  LatePythonCheck ended({python_host("a"), python_host("b"), python_host("c")}, job,
                        [&partial](const std::string& line) { partial.push_back(line); });
  ended.arrived("a", {"3.11.2", "2.1.0", "12.1", ""});
  ended.arrived("c", {"3.11.2", "", "", ""});
  EXPECT_TRUE(partial.empty());
  ended.finish();  // b's probe ended with the job
  ASSERT_EQ(partial.size(), 1u);
  EXPECT_NE(partial[0].find("no torch"), std::string::npos) << partial[0];
}

}  // namespace
}  // namespace hvdrun
