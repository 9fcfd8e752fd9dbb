// One connection to the rendezvous server (session.cc) against malformed, oversized and
// hostile requests (issue 16): errors that end the connection, never the server; bounded
// waits and unsent answers; the rest of the job served meanwhile.
#include "server_test_util.h"

namespace hvdrun::rdv {

using namespace server_test;

// Issue 16.1: a counter key that holds a non-number made std::stoll throw and ended the
// server thread; "5junk" was read as 5.
TEST(RendezvousServer, BarrierOnACounterThatIsNotANumberIsAnErrorNotTheEnd) {
  Fixture f(1);
  const char* bad[] = {"abc", "99999999999999999999", "5junk", "", " 5"};
  for (const char* value : bad) {
    Client c = f.connect();
    ASSERT_TRUE(c.set("x/count", value).ok());
    auto b = c.barrier("x", 2, 5);
    ASSERT_FALSE(b.ok()) << "'" << value << "' accepted as a count";
    EXPECT_TRUE(contains(b.error().message, "barrier 'x': key 'x/count' holds '" + std::string(value) +
                                                "', not a 64-bit integer"))
        << b.error().message;
    server_still_serves(f);
  }
  Client c = f.connect();
  ASSERT_TRUE(c.set("y", "5junk").ok());
  auto a = c.add("y", 1);
  ASSERT_FALSE(a.ok());
  EXPECT_TRUE(contains(a.error().message, "key 'y' holds '5junk'")) << a.error().message;
  server_still_serves(f);
}

TEST(RendezvousServer, CounterOverflowIsRefused) {
  Fixture f(1);
  Client c = f.connect();
  ASSERT_EQ(*c.add("n", INT64_MAX), INT64_MAX);
  auto a = c.add("n", 1);
  ASSERT_FALSE(a.ok());
  EXPECT_TRUE(contains(a.error().message, "leaves the 64-bit integer range")) << a.error().message;
  Client d = f.connect();
  ASSERT_TRUE(d.set("z/count", std::to_string(INT64_MAX)).ok());
  auto b = d.barrier("z", 2, 5);
  ASSERT_FALSE(b.ok());
  EXPECT_TRUE(contains(b.error().message, "leaves the 64-bit integer range")) << b.error().message;
  server_still_serves(f);
}

TEST(RendezvousServer, UnprintableKeysAreQuotedInErrors) {
  Fixture f(1);
  Client c = f.connect();
  ASSERT_TRUE(c.set(std::string("k\x1b[2J\xff", 6), "nan").ok());
  auto a = c.add(std::string("k\x1b[2J\xff", 6), 1);
  ASSERT_FALSE(a.ok());
  EXPECT_TRUE(contains(a.error().message, "key 'k\\x1b[2J\\xff' holds 'nan'")) << a.error().message;
}

TEST(RendezvousServer, TooManyWaitsOnOneConnectionAreRefused) {
  Fixture f(1);
  RawSession s(f.server->port(), f.secret);
  for (size_t i = 0; i <= kMaxPendingWaits; ++i) s.send(MsgType::kWait, encode_wait(60000, {"never"}));
  EXPECT_TRUE(contains(s.error(), "more than 64 waits at once on one connection"));
  server_still_serves(f);
}

// The waits of a connection that goes away go with it (they held the server's memory until
// their time-out, days if asked).
TEST(RendezvousServer, WaitsOfAClosedConnectionAreDropped) {
  Fixture f(1);
  {
    RawSession s(f.server->port(), f.secret);
    std::vector<std::string> keys;
    for (int k = 0; k < 1000; ++k) keys.push_back("never/" + std::to_string(k) + std::string(1000, 'k'));
    for (int i = 0; i < 60; ++i) s.send(MsgType::kWait, encode_wait(UINT32_MAX, keys));
    s.send(MsgType::kBarrier, encode_barrier({"never-complete", 5, UINT32_MAX}));
    auto deadline = in(60);  // 60 MB of waits: minutes of work under TSan, not seconds
    while (f.server->waiting() < 61 && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    ASSERT_EQ(f.server->waiting(), 61);
  }
  auto deadline = in(60);  // 60 MB of waits: minutes of work under TSan, not seconds
  while (f.server->waiting() > 0 && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(f.server->waiting(), 0);
  // A wait answered in time, or timed out, is not counted either.
  Client c = f.connect();
  EXPECT_FALSE(c.wait({"x"}, 0.05).ok());
  EXPECT_EQ(f.server->waiting(), 0);
  server_still_serves(f);
}

TEST(RendezvousServer, MalformedRequestsGetAnErrorAndTheServerGoesOn) {
  Fixture f(2);
  struct Case {
    MsgType type;
    std::string payload;
    const char* part;
  } cases[] = {
      {MsgType::kSet, "x", "malformed set message"},
      {MsgType::kGet, "", "malformed string message"},
      {MsgType::kAdd, encode_string("k"), "malformed add message"},
      {MsgType::kWait, "abc", "malformed wait message"},
      {MsgType::kBarrier, encode_barrier({"b", 0, 10}), "malformed barrier message"},
      {MsgType::kGetPeer, "1234", "malformed counter message"},
      {MsgType::kRegister, encode_register({0, 2, "h", "a", 70000}), "data port 70000; expected 1 to 65535"},
      {MsgType::kChallenge, "", "unexpected message challenge"},
      {MsgType::kFatal, "\x01", "malformed string message"},
  };
  for (const auto& c : cases) {
    RawSession s(f.server->port(), f.secret);
    s.send(c.type, c.payload);
    std::string e = s.error();
    EXPECT_TRUE(contains(e, c.part)) << msg_type_name(c.type) << ": " << e;
  }
  f.run_job(2);
}

// A client that pipelines requests and never reads the answers: the server stops reading
// from it (its unsent answers stay bounded) and serves everyone else.
TEST(RendezvousServer, AClientThatNeverReadsDoesNotStopTheOthers) {
  Fixture f(2);
  {
    Client c = f.connect();
    ASSERT_TRUE(c.set("v", std::string(kMaxValueBytes, 'v')).ok());
  }
  RawSession s(f.server->port(), f.secret);
  int one = 4096;
  setsockopt(s.fd.get(), SOL_SOCKET, SO_RCVBUF, &one, sizeof one);
  std::string get = encode_frame(MsgType::kGet, encode_string("v"));
  std::string many;
  for (int i = 0; i < 300; ++i) many += get;
  ASSERT_LT(many.size(), 8192u);  // one write, one read of the session's buffer takes them all
  ASSERT_TRUE(reset_peak_rss());
  long before = peak_rss_kib();
  ASSERT_EQ(write(s.fd.get(), many.data(), many.size()), static_cast<ssize_t>(many.size()));
  // The first answer arriving says the server read the requests; it handles all it will of
  // one read in one handler on its one thread (unbounded, it answered all 300 there), so
  // the job's round trips after it come after that handler.
  auto deadline = in(10);
  int unread = 0;
  while ((ioctl(s.fd.get(), FIONREAD, &unread) != 0 || unread == 0) && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  ASSERT_GT(unread, 0) << "no answer came";
  f.run_job(2);
  // 300 answers of 1 MiB are 300 MiB; the server holds at most a few of them. The peak
  // resident size keeps what it held.
  EXPECT_LT(peak_rss_kib() - before, 100 * 1024) << "the unread answers grew the server";
}

}  // namespace hvdrun::rdv
