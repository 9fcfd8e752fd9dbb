#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>

#include "launcher/rank_assignment.h"
#include "launcher/exit_status.h"
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
    EXPECT_EQ(exit_code_for(r.error()), 2);
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


namespace {

bool all_printable(const std::string& s) {
  for (unsigned char c : s)
    if (c < 0x20 || c >= 0x7f) return false;
  return true;
}

struct TempDir {
  std::string path;
  TempDir() {
    char t[] = "/tmp/hvdrun-hosts-XXXXXX";
    path = mkdtemp(t);
  }
  ~TempDir() { std::system(("rm -rf " + path).c_str()); }
  std::string write(const std::string& name, const std::string& text) {
    std::string p = path + "/" + name;
    FILE* f = fopen(p.c_str(), "wb");
    fwrite(text.data(), 1, text.size(), f);
    fclose(f);
    return p;
  }
};

}  // namespace

// Issue 16.14: "--hosts=-oProxyCommand:1" was a host named "-oProxyCommand" (an ssh option).
TEST(HostList, HostNamesThatAreOptionsAreRefused) {
  for (const char* list : {"-oProxyCommand:1", "a,-oProxyCommand=nc", "--help", "[-1::2]:2"}) {
    auto r = parse_host_list(list);
    ASSERT_FALSE(r.ok()) << list;
    EXPECT_NE(r.error().message.find("starts with '-'; expected a host name or address, not an option"),
              std::string::npos)
        << r.error().message;
    EXPECT_EQ(exit_code_for(r.error()), 2);
  }
  auto f = parse_hostfile_text("-oProxyCommand=x slots=1\n", "hf");
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.error().message.find("hf:1: host '-oProxyCommand=x' starts with '-'"), 0u) << f.error().message;
  // A '-' inside a name is fine.
  EXPECT_TRUE(parse_host_list("node-1,a-b:2").ok());
  // Characters no host name has, and names longer than DNS allows.
  for (std::string list : {std::string("a;b"), std::string("a$(x)"), std::string("a\x01"), std::string("a`b`"),
                           std::string(254, 'a')}) {
    auto r = parse_host_list(list);
    ASSERT_FALSE(r.ok()) << list;
    EXPECT_TRUE(all_printable(r.error().message)) << r.error().message;
  }
  EXPECT_TRUE(parse_host_list(std::string(253, 'a')).ok());
  EXPECT_EQ(check_host_name("-x"), "host '-x' starts with '-'; expected a host name or address, not an option");
  EXPECT_EQ(check_host_name("fe80::1%eth0"), "");
  EXPECT_EQ(check_host_name("node1"), "");
}

// Issue 16.10: 2,100 hosts of 1,048,576 slots ended in std::bad_alloc.
TEST(HostList, SlotTotalsAreSummedIn64BitsAndBounded) {
  std::string list, file;
  for (int i = 0; i < 2100; ++i) {
    list += (i ? ",h" : "h") + std::to_string(i) + ":1048576";
    file += "h" + std::to_string(i) + " slots=1048576\n";
  }
  for (auto hosts : {parse_host_list(list), parse_hostfile_text(file, "hf")}) {
    ASSERT_TRUE(hosts.ok()) << hosts.error().message;
    EXPECT_EQ(total_slots(*hosts), 2100LL * 1048576);
    auto r = assign_ranks(*hosts, 0);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().message,
              "the hosts have 2202009600 slots in all, more than the 1048576 ranks one job may have; give -np");
    EXPECT_EQ(exit_code_for(r.error()), 2);
    auto few = assign_ranks(*hosts, 4);  // a few ranks on big hosts is fine
    ASSERT_TRUE(few.ok());
    EXPECT_EQ(few->size(), 4u);
  }
  auto big = assign_ranks({{"a", 1}}, 1 << 24);
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.error().message, "-np 16777216: expected at most 1048576 ranks in one job");
  // One host named again and again cannot pass the per-host bound (nor overflow an int).
  std::string again;
  for (int i = 0; i < 3000; ++i) again += (i ? ",a:" : "a:") + std::to_string(1 << 20);
  auto r = parse_host_list(again);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("host 'a' has 2097152 slots in all (named more than once); expected at most 1048576"),
            std::string::npos)
      << r.error().message;
  auto rf = parse_hostfile_text("a slots=1048576\na slots=1\n", "hf");
  ASSERT_FALSE(rf.ok());
  EXPECT_EQ(rf.error().message.find("hf:2: host 'a' has 1048577 slots"), 0u) << rf.error().message;
  EXPECT_FALSE(parse_host_list("a:1048577").ok());
  EXPECT_FALSE(parse_host_list("a:99999999999999999999").ok());
}

// Issue 16.11: a 100,000-line host file took 10.4 s (add_host scanned the list per line).
// The time per line is bench/hostfile_bench.cc's figure; here, what such a file gives.
TEST(HostFile, AHundredThousandLinesAreEachOneHost) {
  std::string text;
  for (int i = 0; i < 100000; ++i) text += "node" + std::to_string(i) + " slots=2\n";
  text += "node0 slots=3\n";  // the first host again, 100,000 lines later: its slots add up
  auto r = parse_hostfile_text(text, "big");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->size(), 100000u);
  EXPECT_EQ(r->front(), (HostSlots{"node0", 5}));
  EXPECT_EQ(r->back(), (HostSlots{"node99999", 2}));
}

TEST(HostFile, ByteOrderMarkIsSkippedAndBinaryIsQuoted) {
  auto r = parse_hostfile_text("\xEF\xBB\xBFnode1 slots=2\r\nnode2\r\n", "win.txt");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(*r, (H{{"node1", 2}, {"node2", 1}}));
  auto b = parse_hostfile_text(std::string("node1\n\x7f" "ELF\x02\x01\x01\0\0 slots=\x1b[31m\n", 27), "bin");
  ASSERT_FALSE(b.ok());
  EXPECT_TRUE(all_printable(b.error().message)) << b.error().message;
  EXPECT_EQ(b.error().message.find("bin:2: invalid character '\\x7f' in host '\\x7fELF\\x02\\x01\\x01\\x00\\x00'"), 0u)
      << b.error().message;
  auto s = parse_hostfile_text("a slots=\x1b[2J\n", "esc");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().message, "esc:1: slots '\\x1b[2J': expected an integer");
}

TEST(HostFile, OnlyRegularFilesWithinTheBound) {
  TempDir d;
  struct Case {
    std::string path;
    std::string part;
  } cases[] = {
      {d.path, "is a directory; expected a regular file"},
      {"/dev/zero", "host file '/dev/zero': is a character device; expected a regular file"},
      {"/dev/null", "is a character device"},
  };
  for (const auto& c : cases) {  // refused by its type, before a byte is read
    auto r = read_hostfile(c.path);
    ASSERT_FALSE(r.ok()) << c.path;
    EXPECT_NE(r.error().message.find(c.part), std::string::npos) << r.error().message;
    EXPECT_EQ(exit_code_for(r.error()), 2);
  }
  std::string fifo = d.path + "/fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  auto rf = read_hostfile(fifo);  // does not wait for a writer
  ASSERT_FALSE(rf.ok());
  EXPECT_NE(rf.error().message.find("is a pipe; expected a regular file"), std::string::npos);
  std::string big = d.write("big", "");
  ASSERT_EQ(truncate(big.c_str(), static_cast<off_t>(kMaxHostfileBytes) + 1), 0);
  auto rb = read_hostfile(big);
  ASSERT_FALSE(rb.ok());
  EXPECT_NE(rb.error().message.find("is 16777217 bytes; expected at most 16777216"), std::string::npos)
      << rb.error().message;
  auto ok = read_hostfile(d.write("good", "\xEF\xBB\xBFnode1 slots=3\n"));
  ASSERT_TRUE(ok.ok()) << ok.error().message;
  EXPECT_EQ(*ok, (H{{"node1", 3}}));
}

}  // namespace hvdrun
