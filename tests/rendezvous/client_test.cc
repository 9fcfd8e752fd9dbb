// The worker's rendezvous client (rendezvous/client): against the real server on loopback,
// and against fake servers (a listening socket the test drives) for what a real server
// does not do: fail its proof, stay silent, close mid-call.
#include "rendezvous/client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <thread>

#include <future>
#include <gtest/gtest.h>
#include <string>

#include "fake_rendezvous.h"
#include "rendezvous/auth.h"
#include "rendezvous/server.h"

namespace hvdrun::rdv {
namespace {

Clock::time_point in(double s) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

std::unique_ptr<Server> start_server(const std::string& secret, int ranks = 1) {
  ServerOptions o;
  o.secret = secret;
  for (int r = 0; r < ranks; ++r) o.ranks.push_back({"h", r});
  auto s = Server::start(o, {});
  EXPECT_TRUE(s.ok()) << (s.ok() ? "" : s.error().message);
  return s.ok() ? std::move(*s) : nullptr;
}

// A loopback socket, bound; listening unless `listen_too` is false (then connections to
// its port are refused).
struct FakeServer {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int port = 0;
  explicit FakeServer(bool listen_too = true) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    socklen_t len = sizeof a;
    getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    port = ntohs(a.sin_port);
    if (listen_too) {
      EXPECT_EQ(::listen(fd, 8), 0);
    }
  }
  ~FakeServer() { ::close(fd); }
  // The next connection (within 10 s; -1 if none).
  int accept_one() const {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 10000) != 1) return -1;
    return ::accept4(fd, nullptr, nullptr, SOCK_CLOEXEC);
  }
};

// Reads one frame (header, then body) from `fd`; "" on EOF or after 10 s.
std::string read_frame(int fd) {
  std::string data;
  char buf[512];
  while (data.size() < kHeaderBytes ||
         data.size() < kHeaderBytes + *decode_length(data.data(), kMaxFrameBeforeAuth)) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 10000) != 1) return "";
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) return "";
    data.append(buf, static_cast<size_t>(n));
  }
  return data;
}

TEST(RendezvousClient, TalksToTheServerWithTheJobSecret) {
  std::string secret = new_secret();
  auto server = start_server(secret);
  auto c = Client::connect("127.0.0.1", server->port(), secret, in(10));
  ASSERT_TRUE(c.ok()) << c.error().message;
  ASSERT_TRUE(c->set("k", std::string("v\0w", 3)).ok());
  EXPECT_EQ(*c->get("k"), std::string("v\0w", 3));
  auto missing = c->get("nope");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().kind, ErrorKind::kMissingKey);
  EXPECT_EQ(*c->add("n", 5), 5);
  EXPECT_EQ(*c->add("n", -2), 3);
  EXPECT_EQ(c->local_address(), "127.0.0.1");
}

// Another job's server (another secret) fails the client's check of its proof: refused at
// once as an authentication error, naming the server.
TEST(RendezvousClient, AnotherJobsServerIsAnAuthenticationError) {
  auto server = start_server(new_secret());
  auto c = Client::connect("127.0.0.1", server->port(), new_secret(), in(10));
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().kind, ErrorKind::kAuth) << c.error().message;
  std::string endpoint = "127.0.0.1:" + std::to_string(server->port());
  EXPECT_EQ(c.error().message, "rendezvous " + endpoint +
                                   ": the server failed authentication (wrong HVDRUN_SECRET, or not this job's hvdrun)");
}

// A server that proves itself but refuses the client's proof answers the first request
// with its error: an authentication error, not a lost connection.
TEST(RendezvousClient, RefusedByTheServerIsAnAuthenticationError) {
  FakeServer fake;
  std::string secret = new_secret();
  auto client = std::async(std::launch::async, [&]() -> Status {
    auto c = Client::connect("127.0.0.1", fake.port, secret, in(10));
    if (!c) return c.error();
    return c->set("k", "v");
  });
  int conn = fake.accept_one();
  ASSERT_GE(conn, 0);
  std::string hello = read_frame(conn);
  ASSERT_EQ(hello.size(), kHeaderBytes + 2 + kNonceBytes) << "not a hello";
  std::string server_nonce = random_bytes(kNonceBytes);
  std::string challenge =
      encode_frame(MsgType::kChallenge, server_nonce + server_proof(secret, hello.substr(kHeaderBytes + 2), server_nonce));
  ASSERT_EQ(::write(conn, challenge.data(), challenge.size()), static_cast<ssize_t>(challenge.size()));
  ASSERT_FALSE(read_frame(conn).empty());  // the client's proof
  std::string refusal = encode_frame(MsgType::kAuthFailed, encode_string("authentication failed"));
  ASSERT_EQ(::write(conn, refusal.data(), refusal.size()), static_cast<ssize_t>(refusal.size()));
  auto s = client.get();
  ::close(conn);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().kind, ErrorKind::kAuth) << s.error().message;
  EXPECT_EQ(s.error().message, "rendezvous 127.0.0.1:" + std::to_string(fake.port) +
                                   ": authentication refused by the server (wrong HVDRUN_SECRET?)");
}

// A server that cannot prove it knows the secret is not this job's hvdrun: refused at once.
TEST(RendezvousClient, AServerThatFailsItsProofIsRefused) {
  FakeServer fake;
  auto client = std::async(std::launch::async, [&] { return Client::connect("127.0.0.1", fake.port, new_secret(), in(10)); });
  int conn = fake.accept_one();
  ASSERT_GE(conn, 0);
  std::string hello = read_frame(conn);
  ASSERT_EQ(hello.size(), kHeaderBytes + 2 + kNonceBytes) << "not a hello";
  std::string challenge = encode_frame(MsgType::kChallenge, random_bytes(kNonceBytes) + std::string(kMacBytes, 'x'));
  ASSERT_EQ(::write(conn, challenge.data(), challenge.size()), static_cast<ssize_t>(challenge.size()));
  auto c = client.get();
  ::close(conn);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().kind, ErrorKind::kAuth);
  EXPECT_TRUE(contains(c.error().message, "the server failed authentication")) << c.error().message;
}

TEST(RendezvousClient, ASilentServerIsATimeoutAtTheDeadline) {
  FakeServer fake;  // accepts (the kernel's backlog) and never answers
  auto c = Client::connect("127.0.0.1", fake.port, new_secret(), in(0.3));
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().kind, ErrorKind::kTimeout);
  EXPECT_EQ(c.error().sys_errno, ETIMEDOUT);
  EXPECT_TRUE(contains(c.error().message, "no reply before the deadline")) << c.error().message;
}

TEST(RendezvousClient, AServerThatClosesIsAConnectionLost) {
  FakeServer fake;
  auto client = std::async(std::launch::async, [&] { return Client::connect("127.0.0.1", fake.port, new_secret(), in(10)); });
  int conn = fake.accept_one();
  ASSERT_GE(conn, 0);
  ASSERT_FALSE(read_frame(conn).empty());
  ::close(conn);
  auto c = client.get();
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(contains(c.error().message, "connection lost (closed by hvdrun)")) << c.error().message;
}

// Nothing listens: the client retries (hvd_init may start before hvdrun's server is up)
// until its deadline, then says where it tried.
TEST(RendezvousClient, RefusedUntilTheDeadlineNamesTheEndpoint) {
  FakeServer closed(/*listen_too=*/false);
  auto c = Client::connect("127.0.0.1", closed.port, new_secret(), in(0.3));
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(contains(c.error().message, "rendezvous 127.0.0.1:" + std::to_string(closed.port) + ": connect: "))
      << c.error().message;
  auto bad = Client::connect("no-such-host.invalid", 1, new_secret(), in(5));
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(contains(bad.error().message, "rendezvous no-such-host.invalid:1: ")) << bad.error().message;
}

// This network namespace's count of refused TCP connects (/proc/net/snmp, AttemptFails).
long refused_connects() {
  FILE* f = fopen("/proc/net/snmp", "r");
  if (!f) return -1;
  char names[1024], values[1024];
  long result = -1;
  while (fgets(names, sizeof names, f) && fgets(values, sizeof values, f)) {
    if (strncmp(names, "Tcp:", 4) != 0) continue;
    char *ns = nullptr, *vs = nullptr;
    for (char *n = strtok_r(names, " \n", &ns), *v = strtok_r(values, " \n", &vs); n && v;
         n = strtok_r(nullptr, " \n", &ns), v = strtok_r(nullptr, " \n", &vs))
      if (strcmp(n, "AttemptFails") == 0) result = atol(v);
  }
  fclose(f);
  return result;
}

// The server comes up on the port after the client was refused there: the client retries
// and gets there. (The refusal is seen in the namespace's counter; another process's
// refused connect could end that wait early, which makes the test weaker, never wrong.)
TEST(RendezvousClient, RetriesUntilTheServerListens) {
  long refused_before = refused_connects();
  std::string secret = new_secret();
  FakeServer reserved(/*listen_too=*/false);  // refuses until the server takes its port
  int port = reserved.port;
  auto client = std::async(std::launch::async, [&] {
    auto c = Client::connect("127.0.0.1", port, secret, in(20));
    if (!c) return c.error().message;
    auto s = c->set("k", "v");
    return s ? std::string() : s.error().message;
  });
  auto deadline = in(10);
  while (refused_connects() == refused_before && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_GT(refused_connects(), refused_before) << "the client was never refused";
  ServerOptions o;
  o.secret = secret;
  o.port = port;
  o.ranks.push_back({"h", 0});
  ::close(reserved.fd);
  reserved.fd = -1;
  auto server = Server::start(o, {});
  ASSERT_TRUE(server.ok()) << server.error().message;
  EXPECT_EQ(client.get(), "");
}

// Elastic: a register for a round that is over is answered kStaleRound with the server's
// round; the client asks for that round's request and registers again.
TEST(RendezvousClient, AStaleRoundRegistersAgainInTheServersRound) {
  std::string secret = new_secret();
  FakeRendezvous fake(secret);
  fake.begin_round(3, 1);
  auto c = Client::connect("127.0.0.1", fake.port(), secret, in(10));
  ASSERT_TRUE(c.ok()) << c.error().message;
  std::vector<int64_t> asked;
  auto for_round = [&](int64_t round) -> Result<RegisterRequest> {
    asked.push_back(round);
    return RegisterRequest{0, 1, "h", "127.0.0.1", 4000, static_cast<int32_t>(round)};
  };
  auto reg = c->register_in_round({1, 2, "h", "127.0.0.1", 4000, 2}, for_round, in(10));
  ASSERT_TRUE(reg.ok()) << reg.error().message;
  EXPECT_EQ(reg->size, 1);
  EXPECT_EQ(reg->left.port, 4000);
  EXPECT_EQ(asked, std::vector<int64_t>{3});
  EXPECT_EQ(fake.stale_answers(), 1);
}

// The newest round has no place for this worker: the loop ends with that error.
TEST(RendezvousClient, AStaleRoundWithoutThisSlotEndsTheRegistration) {
  std::string secret = new_secret();
  FakeRendezvous fake(secret);
  fake.begin_round(2, 1);
  auto c = Client::connect("127.0.0.1", fake.port(), secret, in(10));
  ASSERT_TRUE(c.ok()) << c.error().message;
  auto removed = [](int64_t) -> Result<RegisterRequest> { return make_error(ErrorKind::kRemoved, "slot removed"); };
  auto reg = c->register_in_round({0, 1, "h", "127.0.0.1", 4000, 1}, removed, in(10));
  ASSERT_FALSE(reg.ok());
  EXPECT_EQ(reg.error().kind, ErrorKind::kRemoved);
}

// A round the server has not begun yet is asked for again until it begins.
TEST(RendezvousClient, ARoundNotBegunYetIsAskedAgain) {
  std::string secret = new_secret();
  FakeRendezvous fake(secret);
  fake.begin_round(1, 1);
  auto c = Client::connect("127.0.0.1", fake.port(), secret, in(10));
  ASSERT_TRUE(c.ok()) << c.error().message;
  int asked = 0;
  auto for_round = [&](int64_t) -> Result<RegisterRequest> {
    ++asked;
    return make_error(ErrorKind::kInternal, "not asked for an older round");
  };
  auto reg = std::async(std::launch::async, [&] {
    return c->register_in_round({0, 1, "h", "127.0.0.1", 4000, 2}, for_round, in(30));
  });
  for (auto until = in(30); fake.stale_answers() == 0 && Clock::now() < until;) std::this_thread::yield();
  ASSERT_GE(fake.stale_answers(), 1);  // refused at least once: round 2 had not begun
  fake.begin_round(2, 1);
  auto r = reg.get();
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(asked, 0);
}

}  // namespace
}  // namespace hvdrun::rdv
