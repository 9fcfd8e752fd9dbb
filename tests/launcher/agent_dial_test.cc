// The srun-started agent's connect-back (launcher/agent_dial): hvdrun's listener is not
// there at the first try (a refused connection, as on a link that flaps while the agents
// start); the agent tries again within its deadline and attaches once it is.
#include "launcher/agent_dial.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>

#include "common/net.h"
#include "common/unique_fd.h"
#include "launcher/agent_wire.h"

namespace hvdrun {
namespace {

// A socket bound to a loopback port, not (yet) listening: a connection is refused.
struct NotYetListening {
  NotYetListening() {
    fd.reset(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
    socklen_t len = sizeof sa;
    getsockname(fd.get(), reinterpret_cast<sockaddr*>(&sa), &len);
    port = ntohs(sa.sin_port);
  }
  UniqueFd fd;
  int port = 0;
};

TEST(AgentDial, ARefusedFirstTryIsTriedAgainWithinTheDeadline) {
  setenv("HVDRUN_AGENT_STACK", network_stack_id().c_str(), 1);  // loopback is tried
  setenv("HVDRUN_AGENT_TOKEN", "t0ken", 1);
  NotYetListening hvdrun;
  std::atomic<int> retries{0};
  auto s = dial_launcher(std::to_string(hvdrun.port) + " 127.0.0.1", "node1",
                         std::chrono::steady_clock::now() + std::chrono::seconds(20), [&] {
                           if (retries++ == 0) listen(hvdrun.fd.get(), 4);  // hvdrun's listener is up now
                         });
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_EQ(retries.load(), 1);
  UniqueFd conn(accept(hvdrun.fd.get(), nullptr, nullptr));
  ASSERT_TRUE(conn.valid());
  agentwire::FrameReader reader;
  char buf[4096];
  ssize_t n = read(conn.get(), buf, sizeof buf);
  ASSERT_GT(n, 0);
  ASSERT_TRUE(reader.feed(std::string_view(buf, static_cast<size_t>(n))).ok());
  auto f = reader.next();
  ASSERT_TRUE(f);
  EXPECT_EQ(f->type, agentwire::Type::kAttach);
  EXPECT_NE(f->payload.find("t0ken"), std::string::npos);
}

TEST(AgentDial, NoAddressAnsweringByTheDeadlineNamesEachTry) {
  setenv("HVDRUN_AGENT_STACK", network_stack_id().c_str(), 1);
  NotYetListening hvdrun;
  int retries = 0;
  auto s = dial_launcher(std::to_string(hvdrun.port) + " 127.0.0.1", "node1",
                         std::chrono::steady_clock::now() + std::chrono::milliseconds(300), [&] { ++retries; });
  ASSERT_FALSE(s.ok());
  EXPECT_GE(retries, 1);  // more than the one round
  EXPECT_NE(s.error().message.find("cannot reach hvdrun on port " + std::to_string(hvdrun.port) +
                                   " at any of its addresses within the start timeout: 127.0.0.1 ("),
            std::string::npos)
      << s.error().message;
}

}  // namespace
}  // namespace hvdrun
