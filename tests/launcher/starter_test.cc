// How an agent is started and its stream made (launcher/starter): the launch command's
// template run here, and srun's step with a stand-in srun on PATH that the test plays
// the agents of.
#include "launcher/starter.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "common/socket_io.h"
#include "common/strings.h"
#include "common/unique_fd.h"
#include "launcher/agent_messages.h"
#include "launcher/agent_wire.h"

namespace hvdrun {
namespace {

using Clock = std::chrono::steady_clock;

// What the link's stdout gives until `want` is in it, or its end, or 10 s.
std::string read_until(HostLink& link, const std::string& want) {
  std::string got;
  auto deadline = Clock::now() + std::chrono::seconds(10);
  while (got.find(want) == std::string::npos && Clock::now() < deadline) {
    auto r = link.read(100);
    if (!r) break;
    got += *r;
  }
  return got;
}

TEST(Starter, ALaunchCommandRunsTheAgentThroughItsTemplate) {
  StarterSettings s;
  s.launch_command = "sh -c 'echo on {host}: \"$@\"' sh";
  s.remote_hvdrun = "/opt/hvdrun";
  auto starter = make_starter(LauncherKind::kCommand, s);
  auto link = starter->open("node7", Clock::now() + std::chrono::seconds(10));
  ASSERT_TRUE(link.ok()) << link.error().message;
  EXPECT_EQ(read_until(**link, "\n"), "on node7: /opt/hvdrun --agent --start-timeout=30\n");
  EXPECT_EQ(starter->text_before_agent("hi"), "the launch command printed text on stdout before the agent started: 'hi'");
}

TEST(Starter, SshBlamesTheRemoteShellForTextBeforeTheAgent) {
  auto starter = make_starter(LauncherKind::kSsh, StarterSettings{});
  EXPECT_NE(starter->text_before_agent("motd").find("a shell startup file such as ~/.bashrc"), std::string::npos);
}

// A directory on PATH with a stand-in `srun`: it writes its environment, then waits for a
// line on the FIFO `go`, says an error on stderr and exits 1 (a step Slurm refused).
struct FakeSrun {
  std::string dir, old_path;
  FakeSrun() {
    char t[] = "/tmp/hvdrun-starter-XXXXXX";
    dir = mkdtemp(t);
    std::ofstream(dir + "/srun") << "#!/bin/sh\nenv > \"" << dir << "/env.tmp\"\nmv \"" << dir << "/env.tmp\" \"" << dir
                                 << "/env\"\nread line < \"" << dir << "/go\"\n"
                                 << "echo 'srun: error: Unable to create step: bad partition' >&2\nexit 1\n";
    chmod((dir + "/srun").c_str(), 0755);
    mkfifo((dir + "/go").c_str(), 0600);
    const char* p = std::getenv("PATH");
    old_path = p ? p : "";
    setenv("PATH", (dir + ":" + old_path).c_str(), 1);
  }
  ~FakeSrun() {
    setenv("PATH", old_path.c_str(), 1);
    std::system(("rm -rf '" + dir + "'").c_str());
  }
  // srun's environment, once it has written it (opening the FIFO waits until srun reads it).
  std::map<std::string, std::string> env_then_fail() {
    int go = open((dir + "/go").c_str(), O_WRONLY | O_CLOEXEC);  // srun is at its `read` now
    std::map<std::string, std::string> env;
    std::ifstream in(dir + "/env");
    for (std::string line; std::getline(in, line);)
      if (size_t eq = line.find('='); eq != std::string::npos) env[line.substr(0, eq)] = line.substr(eq + 1);
    go_fd.reset(go);
    return env;
  }
  void fail_now() {
    [[maybe_unused]] ssize_t n = write(go_fd.get(), "\n", 1);
    go_fd.reset();
  }
  UniqueFd go_fd;
};

// An agent dialing back: the job's token in its first frame (kAttach), as `node`.
UniqueFd attach(int port, const std::string& token, const std::string& node) {
  UniqueFd s(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(s.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return UniqueFd();
  AgentAttach att;
  att.token = token;
  att.node = node;
  if (!write_all(s.get(), agentwire::encode(agentwire::Type::kAttach, encode_attach(att))).ok()) return UniqueFd();
  return s;
}

TEST(Starter, SrunAgentsDialBackWithTheJobsTokenAndAnEndedStepIsNamed) {
  FakeSrun srun;
  setenv("HVDRUN_AGENT_TOKEN", "stale-from-an-outer-job", 1);
  StarterSettings s;
  s.remote_hvdrun = "/opt/hvdrun";
  auto starter = make_starter(LauncherKind::kSlurm, s);
  auto deadline = Clock::now() + std::chrono::seconds(30);
  ASSERT_TRUE(starter->begin({"n1", "n2"}, deadline).ok());
  auto env = srun.env_then_fail();
  unsetenv("HVDRUN_AGENT_TOKEN");
  const std::string token = env["HVDRUN_AGENT_TOKEN"];
  EXPECT_EQ(token.size(), 64u) << token;  // ours, not the one in hvdrun's environment
  auto dial = split(env["HVDRUN_AGENT_CONNECT"], ' ');
  ASSERT_EQ(dial.size(), 2u) << env["HVDRUN_AGENT_CONNECT"];
  EXPECT_EQ(dial[1].substr(dial[1].size() - 9), "127.0.0.1") << dial[1];  // loopback last
  EXPECT_FALSE(env["HVDRUN_AGENT_STACK"].empty());
  int port = std::atoi(dial[0].c_str());

  UniqueFd impostor = attach(port, std::string(64, '0'), "n2");  // a wrong token is dropped
  UniqueFd n1 = attach(port, token, "n1");
  ASSERT_TRUE(n1.valid());
  auto link = starter->open("n1", deadline);
  ASSERT_TRUE(link.ok()) << link.error().message;
  ASSERT_TRUE((*link)->write("to the agent").ok());
  char buf[16] = {};
  ASSERT_TRUE(read_exact(n1.get(), buf, 12, Clock::now() + std::chrono::seconds(10)).ok());
  EXPECT_EQ(std::string(buf, 12), "to the agent");
  ASSERT_TRUE(write_all(n1.get(), "from it").ok());
  EXPECT_EQ(read_until(**link, "from it"), "from it");
  // A host an elastic job adds later: refused with why (the step is the job's only one).
  auto again = starter->begin({"n3"}, deadline);
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.error().kind, ErrorKind::kLaunchFailed);
  EXPECT_EQ(again.error().message,
            "n3: --launcher slurm starts every agent in one srun step when the job starts; a host added later cannot "
            "join it (use --launcher ssh or command for an elastic job that adds hosts)");

  srun.fail_now();  // before n2's agent connected back
  auto n2 = starter->open("n2", deadline);
  ASSERT_FALSE(n2.ok());
  EXPECT_EQ(n2.error().kind, ErrorKind::kLaunchFailed);
  EXPECT_EQ(n2.error().message,
            "n2: srun ended (exit 1) before the agent there connected back: srun: error: Unable to create step: bad "
            "partition");
}

TEST(Starter, SrunNotOnPathIsALaunchFailure) {
  const char* p = std::getenv("PATH");
  std::string old = p ? p : "";
  setenv("PATH", "/nonexistent-hvdrun-path", 1);
  auto starter = make_starter(LauncherKind::kSlurm, StarterSettings{});
  auto st = starter->begin({"n1"}, Clock::now() + std::chrono::seconds(5));
  auto again = starter->begin({"n2"}, Clock::now() + std::chrono::seconds(5));  // no step began: the same reason
  setenv("PATH", old.c_str(), 1);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().kind, ErrorKind::kLaunchFailed);
  EXPECT_EQ(st.error().message, "--launcher slurm: srun: command not found (Slurm's srun must be on PATH)");
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.error().message, st.error().message);
}

}  // namespace
}  // namespace hvdrun
