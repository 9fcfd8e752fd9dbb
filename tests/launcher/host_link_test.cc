// The byte streams to an agent (launcher/host_link): a client command's pipes, and
// libssh's connection up to the point a host answers (the whole of it against real sshd
// servers is tests/integration/cluster_test.cc).
#include "launcher/host_link.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "common/unique_fd.h"
#include "common/net.h"
#include "common/socket_io.h"
#include "pid_holder.h"

namespace hvdrun {
namespace {

using Clock = std::chrono::steady_clock;

// What the link's stdout gives until `want` is in it, or its end, or 10 s.
std::string read_until(HostLink& link, const std::string& want, Error* end = nullptr) {
  std::string got;
  auto deadline = Clock::now() + std::chrono::seconds(10);
  while (got.find(want) == std::string::npos && Clock::now() < deadline) {
    auto r = link.read(100);
    if (!r) {
      if (end) *end = r.error();
      break;
    }
    got += *r;
  }
  return got;
}

TEST(CommandLink, CarriesTheClientsStdinStdoutStderrAndExit) {
  auto link = open_command_link({"sh", "-c", "read line; echo \"got $line\"; echo bye >&2; exit 3"}, "b");
  ASSERT_TRUE(link.ok()) << link.error().message;
  HostLink& l = **link;
  EXPECT_EQ(l.label(), "b");
  EXPECT_GT(l.write_room(), 0u);
  ASSERT_TRUE(l.write("hello\n").ok());
  EXPECT_EQ(read_until(l, "got hello\n"), "got hello\n");
  Error end;
  read_until(l, "never said", &end);
  EXPECT_EQ(end.kind, ErrorKind::kPeerLost) << end.message;
  EXPECT_EQ(end.message, "b: the agent closed its output");
  EXPECT_EQ(l.stderr_text(), "bye\n");
  EXPECT_EQ(l.exit_status(), std::optional<int>(3));
  EXPECT_EQ(l.local_address(), "");  // a client command's ends are not ours to know
}

TEST(CommandLink, AClientThatIsNotThereIsAUsageError) {
  auto link = open_command_link({"no-such-client-hvdrun", "b"}, "b");
  ASSERT_FALSE(link.ok());
  EXPECT_EQ(link.error().kind, ErrorKind::kUsage);
  EXPECT_EQ(link.error().message, "b: no-such-client-hvdrun: command not found");
}

// `n` bytes from `fd` within 10 s; false at EOF, an error or the time-out.
bool read_within(int fd, void* buf, size_t n) {
  size_t got = 0;
  auto deadline = Clock::now() + std::chrono::seconds(10);
  while (got < n) {
    pollfd p{fd, POLLIN, 0};
    int ms = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count());
    if (ms <= 0 || poll(&p, 1, ms) <= 0) return false;
    ssize_t r = read(fd, static_cast<char*>(buf) + got, n - got);
    if (r <= 0) return false;
    got += static_cast<size_t>(r);
  }
  return true;
}

// A launch command's client that hvdrun's loop reaped when it ended (waitpid(-1): the loop
// reaps every child) is not signalled when its link goes away at the end of the job: its
// pid, and so its process group id, may be another process's by then. Here the pid is
// handed straight to a new process group leader (clone3 with set_tid), which reports the
// signals sent to it (its group) up to the test's own SIGUSR1.
TEST(CommandLink, ClientReapedElsewhereIsNotSignalledAtTheEnd) {
  auto link = open_command_link({"sh", "-c", "exit 0"}, "b");
  ASSERT_TRUE(link.ok()) << link.error().message;
  std::string kids;
  {
    std::ifstream in("/proc/self/task/" + std::to_string(gettid()) + "/children");
    std::getline(in, kids);
  }
  pid_t client = static_cast<pid_t>(std::atoi(kids.c_str()));
  ASSERT_GT(client, 0);
  int st = 0;
  ASSERT_EQ(waitpid(client, &st, 0), client);  // as hvdrun's loop does
  // A helper (our child) makes the new holder of the pid (its child, not ours: a process
  // hvdrun does not own) and waits, so that we can look at it.
  int rep[2], report[2];
  ASSERT_EQ(pipe(rep), 0);
  ASSERT_EQ(pipe(report), 0);
  pid_t helper = fork();
  if (helper == 0) {
    long other = clone_holding_pid_reporting(client, report[1]);
    int e = other < 0 ? errno : 0;
    if (write(rep[1], &e, sizeof e) < 0) _exit(1);
    while (true) pause();
  }
  close(rep[1]);
  close(report[1]);
  UniqueFd rep_rd(rep[0]), report_rd(report[0]);
  int e = -1;
  ASSERT_TRUE(read_within(rep_rd.get(), &e, sizeof e));
  auto cleanup = [&] {
    kill(client, SIGKILL);
    kill(helper, SIGKILL);
    waitpid(helper, &st, 0);
  };
  if (e != 0) {
    cleanup();
    GTEST_SKIP() << "clone3 with set_tid: " << std::strerror(e);
  }
  char ready = 0;
  bool holder_ready = read_within(report_rd.get(), &ready, 1);  // it leads its group now
  link->reset();  // the end of the job
  kill(client, SIGUSR1);
  uint64_t pending = 0;
  bool reported = read_within(report_rd.get(), &pending, sizeof pending);
  cleanup();
  ASSERT_TRUE(holder_ready);
  ASSERT_TRUE(reported) << "the process that now has the client's pid was killed";
  EXPECT_EQ(pending & (uint64_t{1} << SIGTERM), 0u) << "it was sent SIGTERM";
  EXPECT_EQ(pending & (uint64_t{1} << SIGCONT), 0u) << "it was sent SIGCONT";
}

SshSettings ssh_to(int port, double timeout) {
  SshSettings s;
  s.port = port;
  s.connect_timeout = timeout;
  s.ssh_dir = "/nonexistent-hvdrun-ssh-dir";
  return s;
}

TEST(SshLink, ARefusedConnectionNamesTheHostAndPort) {
  auto port = free_tcp_port();  // nobody behind it (one it held and let go)
  ASSERT_TRUE(port.ok());
  auto link = open_ssh_link("127.0.0.1", ssh_to(*port, 10), "true");
  ASSERT_FALSE(link.ok());
  EXPECT_EQ(link.error().kind, ErrorKind::kUnreachableHost);
  EXPECT_EQ(link.error().message, "127.0.0.1:" + std::to_string(*port) + ": connection refused");
}

// A host that takes the connection and never says a word (a hung sshd, a black hole behind
// a proxy): the connect time-out ends the handshake.
TEST(SshLink, AHostThatNeverAnswersTimesOut) {
  UniqueFd s(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  ASSERT_EQ(bind(s.get(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(listen(s.get(), 4), 0);  // the kernel completes the handshake; nobody reads
  ASSERT_EQ(getsockname(s.get(), reinterpret_cast<sockaddr*>(&a), &len), 0);
  int port = ntohs(a.sin_port);
  auto link = open_ssh_link("127.0.0.1", ssh_to(port, 0.5), "true");
  ASSERT_FALSE(link.ok());
  EXPECT_EQ(link.error().kind, ErrorKind::kUnreachableHost);
  EXPECT_EQ(link.error().message.rfind("127.0.0.1:" + std::to_string(port) + ": ", 0), 0u) << link.error().message;
  EXPECT_NE(link.error().message.find("timed out"), std::string::npos) << link.error().message;
}

}  // namespace
}  // namespace hvdrun
