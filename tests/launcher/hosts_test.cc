#include "launcher/hosts.h"

#include <gtest/gtest.h>

namespace hvdrun {

using H = std::vector<HostSlots>;

TEST(HostList, SlotsAndBareHosts) {
  EXPECT_EQ(*parse_host_list("a:2,b:4"), (H{{"a", 2}, {"b", 4}}));
  EXPECT_EQ(*parse_host_list("a"), (H{{"a", 1}}));
  // Repeats add up, in first-appearance order (mpirun's -H a,a,b).
  EXPECT_EQ(*parse_host_list("a,a,b"), (H{{"a", 2}, {"b", 1}}));
  EXPECT_EQ(*parse_host_list("b:2,a,b:1"), (H{{"b", 3}, {"a", 1}}));
}

TEST(HostList, AddressesIpv4AndBracketedIpv6) {
  EXPECT_EQ(*parse_host_list("10.0.0.1:2,127.0.0.1"), (H{{"10.0.0.1", 2}, {"127.0.0.1", 1}}));
  EXPECT_EQ(*parse_host_list("[::1]:2,[fe80::1%eth0]"), (H{{"::1", 2}, {"fe80::1%eth0", 1}}));
  EXPECT_EQ(*parse_host_list("node-1.cluster_x:3"), (H{{"node-1.cluster_x", 3}}));
}

TEST(HostList, ErrorsNameTheBadToken) {
  struct Case {
    const char* list;
    const char* message_part;
  } cases[] = {
      {"", "expected host[:slots]"},
      {"a,,b", "empty entry"},
      {"a:0", "'0': expected an integer from 1"},
      {"a:x", "'x': expected an integer"},
      {"a:-1", "'-1'"},
      {"a:2:3", "IPv6 addresses must be written in brackets"},
      {"::1", "IPv6 addresses must be written in brackets"},
      {"[::1", "missing ']'"},
      {"[::1]x", "unexpected 'x'"},
      {"a b", "invalid character ' '"},
      {"a/b:2", "invalid character '/'"},
      {":2", "empty host name"},
  };
  for (const auto& c : cases) {
    auto r = parse_host_list(c.list);
    ASSERT_FALSE(r.ok()) << c.list;
    EXPECT_NE(r.error().message.find(c.message_part), std::string::npos) << c.list << " -> " << r.error().message;
    EXPECT_EQ(r.error().code, 2);
  }
}

TEST(HostFile, AllLineForms) {
  auto r = parse_hostfile_text(
      "# cluster\n"
      "node1 slots=4\n"
      "\n"
      "node2:2   # trailing comment\n"
      "  node3  \n"
      "node4 slots=2 max_slots=8\n"
      "node1 slots=1\n"
      "[::1] slots=2\n",
      "hosts.txt");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(*r, (H{{"node1", 5}, {"node2", 2}, {"node3", 1}, {"node4", 2}, {"::1", 2}}));
}

TEST(HostFile, ErrorsNameFileLineAndToken) {
  auto r = parse_hostfile_text("a slots=2\nb slots=2 gpus=4\n", "hf");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message,
            "hf:2: unexpected token 'gpus=4'; expected 'host slots=N', 'host:N' or 'host'");
  r = parse_hostfile_text("a slots=zero\n", "hf");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message, "hf:1: slots 'zero': expected an integer");
  r = parse_hostfile_text("a:2 slots=3\n", "hf");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("hf:1: slots given twice"), std::string::npos);
  r = parse_hostfile_text("# nothing\n\n", "hf");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message, "hf: no hosts in host file");
  r = read_hostfile("/nonexistent/hosts");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("/nonexistent/hosts"), std::string::npos);
}

}  // namespace hvdrun
