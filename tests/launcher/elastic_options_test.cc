// Horovod Elastic's flags (horovod/runner/launch.py) and --max-restarts, through
// parse_command_line: Horovod's defaults, the checks between them, the settings line.
#include "launcher/elastic_options.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include "launcher/exit_status.h"
#include "launcher/options.h"

namespace hvdrun {
namespace {

ElasticOptions elastic(std::vector<std::string> args) {
  args.push_back("prog");
  auto r = parse_command_line(args);
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
  return r.ok() ? r->options.elastic : ElasticOptions{};
}

// The refusal's one line (exit 2); "" when the command line was accepted.
std::string refusal(std::vector<std::string> args) {
  args.push_back("prog");
  auto r = parse_command_line(args);
  if (r.ok()) return "";
  EXPECT_EQ(exit_code_for(r.error()), 2);
  EXPECT_EQ(r.error().message.find('\n'), std::string::npos);
  return r.error().message;
}

TEST(ElasticOptions, OffUnlessMinNpMaxNpOrDiscovery) {
  EXPECT_FALSE(elastic({"-np", "2"}).enabled);
  EXPECT_TRUE(elastic({"--min-np", "2", "-H", "a:2,b:2"}).enabled);
  EXPECT_TRUE(elastic({"-np", "2", "--max-np", "4", "-H", "a,b"}).enabled);
  EXPECT_TRUE(elastic({"-np", "2", "--host-discovery-script", "./d.sh"}).enabled);
  EXPECT_EQ(elastic_settings_text(elastic({"-np", "2"})), "");
}

TEST(ElasticOptions, HorovodsDefaults) {
  unsetenv("HVDRUN_ELASTIC_TIMEOUT");
  unsetenv("HOROVOD_ELASTIC_TIMEOUT");
  auto e = elastic({"-np", "3", "--host-discovery-script", "./d.sh"});
  EXPECT_EQ(e.min_np, 3);  // --min-np defaults to -np
  EXPECT_EQ(e.max_np, 0);  // unbounded, as Horovod's code (its docs say -np)
  EXPECT_EQ(e.timeout, 600);
  EXPECT_FALSE(e.reset_limit);
  EXPECT_FALSE(e.cooldown);
  EXPECT_EQ(e.discovery_interval, 1);
  EXPECT_EQ(e.discovery_script, "./d.sh");
  EXPECT_EQ(elastic_settings_text(e),
            "elastic: min-np 3, max-np unbounded, hosts from './d.sh' every 1 s (killed after 30 s), bare host 1 "
            "slot(s), elastic timeout 600 s, reset limit none, blacklist for good");
}

TEST(ElasticOptions, EveryFlagTaken) {
  auto e = elastic({"--min-np", "2", "--max-num-proc", "8", "--slots-per-host", "4", "--host-discovery-script",
                    "d.sh", "--elastic-timeout", "5", "--reset-limit", "3", "--blacklist-cooldown-range", "10",
                    "100"});
  EXPECT_EQ(e.min_np, 2);
  EXPECT_EQ(e.max_np, 8);
  EXPECT_EQ(e.slots_per_host, 4);
  EXPECT_EQ(e.timeout, 5);
  EXPECT_EQ(e.reset_limit, 3);
  ASSERT_TRUE(e.cooldown);
  EXPECT_EQ(*e.cooldown, std::make_pair(10, 100));
  EXPECT_EQ(elastic({"--min-num-proc", "2", "-H", "a,b", "--reset-limit", "0"}).reset_limit, 0);
  std::string t = elastic_settings_text(e);
  EXPECT_NE(t.find("max-np 8"), std::string::npos) << t;
  EXPECT_NE(t.find("bare host 4 slot(s)"), std::string::npos) << t;
  EXPECT_NE(t.find("reset limit 3, blacklist 10..100 s cooldown"), std::string::npos) << t;
}

TEST(ElasticOptions, TimeoutFromHorovodsVariableTheFlagWins) {
  setenv("HOROVOD_ELASTIC_TIMEOUT", "42", 1);
  EXPECT_EQ(elastic({"--min-np", "1", "-H", "a,b"}).timeout, 42);
  EXPECT_EQ(elastic({"--min-np", "1", "-H", "a,b", "--elastic-timeout", "7"}).timeout, 7);
  setenv("HOROVOD_ELASTIC_TIMEOUT", "soon", 1);
  EXPECT_NE(refusal({"--min-np", "1", "-H", "a,b"}).find("soon"), std::string::npos);
  unsetenv("HOROVOD_ELASTIC_TIMEOUT");
}

TEST(ElasticOptions, ContradictionsRefusedNamingTheFlag) {
  const std::pair<std::vector<std::string>, const char*> bad[] = {
      {{"--min-np", "4", "--max-np", "2", "-H", "a,b"}, "--max-np 2 is below --min-np 4"},
      {{"-np", "8", "--min-np", "2", "--max-np", "4", "-H", "a,b"}, "-np 8 is outside"},
      {{"-np", "1", "--min-np", "2", "-H", "a,b"}, "-np 1 is outside"},
      {{"--host-discovery-script", "d.sh"}, "give --min-np or -np"},
      {{"--min-np", "2", "-H", "a:2"}, "at least 2 hosts"},
      {{"--blacklist-cooldown-range", "0", "10", "--min-np", "1", "-H", "a,b"}, "MIN '0'"},
      {{"--blacklist-cooldown-range", "10", "5", "--min-np", "1", "-H", "a,b"}, "MAX '5'"},
      {{"--blacklist-cooldown-range", "1", "3601", "--min-np", "1", "-H", "a,b"}, "MAX '3601'"},
      {{"--reset-limit", "2", "-np", "2"}, "--reset-limit is an elastic setting"},
      {{"--slots-per-host", "2", "-np", "2"}, "--slots-per-host is an elastic setting"},
      {{"--max-restarts", "2", "--min-np", "1", "-H", "a,b"}, "give one or the other"},
      {{"--max-restarts", "-1"}, "--max-restarts '-1'"},
      {{"--elastic-timeout", "0", "--min-np", "1", "-H", "a,b"}, "--elastic-timeout '0'"},
      {{"--host-discovery-script", "", "-np", "1"}, "expected a program"},
  };
  for (const auto& [args, what] : bad) {
    std::string m = refusal(args);
    EXPECT_NE(m.find(what), std::string::npos) << args[0] << ": " << m;
  }
}

TEST(ElasticOptions, MaxRestartsAlone) {
  auto e = elastic({"-np", "2", "--max-restarts", "3"});
  EXPECT_FALSE(e.enabled);
  EXPECT_EQ(e.max_restarts, 3);
  EXPECT_EQ(elastic_settings_text(e), "restarts: up to 3 of the whole job");
}

}  // namespace
}  // namespace hvdrun
