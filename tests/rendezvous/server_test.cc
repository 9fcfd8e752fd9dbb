// The rendezvous server in-process, with real sockets: clients as threads. The job, the
// store and its bounds, barriers, refusals and their logs, accepting when out of
// descriptors. (One connection's requests, malformed or hostile: session_test.cc.)
#include <algorithm>

#include "server_test_util.h"

namespace hvdrun::rdv {

using namespace server_test;

TEST(RendezvousServer, JobCompletesAndNeighboursAreRight) {
  Fixture f(5);
  f.run_job(5);
  EXPECT_EQ(f.server->registered(), 5);
  EXPECT_EQ(f.server->rejected(), 0);
}

TEST(RendezvousServer, WrongSecretFailsAtOnceBothWays) {
  Fixture f(1);
  auto start = Clock::now();
  auto c = Client::connect("127.0.0.1", f.server->port(), new_secret(), in(30));
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message.find("the server failed authentication"), std::string::npos) << c.error().message;
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(10)) << "retried until the deadline";
}

TEST(RendezvousServer, ClientWithWrongProofIsRefusedWhileAJobCompletes) {
  Fixture f(3);
  UniqueFd fd = raw_connect(f.server->port());
  std::string hello = encode_frame(MsgType::kHello, random_bytes(kNonceBytes));
  ASSERT_EQ(write(fd.get(), hello.data(), hello.size()), static_cast<ssize_t>(hello.size()));
  char hdr[4];
  ASSERT_EQ(read(fd.get(), hdr, 4), 4);
  std::string body(*decode_length(hdr, kMaxFrame), '\0');
  ASSERT_EQ(read(fd.get(), body.data(), body.size()), static_cast<ssize_t>(body.size()));
  std::string auth = encode_frame(MsgType::kAuth, std::string(kMacBytes, 'x'));  // a guess
  ASSERT_EQ(write(fd.get(), auth.data(), auth.size()), static_cast<ssize_t>(auth.size()));
  f.run_job(3);
  EXPECT_TRUE(closed_by_server(fd.get(), 5));
  wait_rejected(*f.server, 1);
  EXPECT_EQ(f.server->rejected(), 1);
}

TEST(RendezvousServer, GarbageOversizedWrongVersionAndSilentClientsAreClosed) {
  Fixture f(4, 0, /*handshake_timeout=*/0.3);
  UniqueFd garbage = raw_connect(f.server->port());
  std::string junk = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  ASSERT_GT(write(garbage.get(), junk.data(), junk.size()), 0);
  UniqueFd oversized = raw_connect(f.server->port());
  uint32_t len = 1u << 30;
  ASSERT_EQ(write(oversized.get(), &len, 4), 4);
  UniqueFd version = raw_connect(f.server->port());
  std::string v2 = encode_frame(MsgType::kHello, random_bytes(kNonceBytes));
  v2[4] = 7;
  ASSERT_GT(write(version.get(), v2.data(), v2.size()), 0);
  UniqueFd silent = raw_connect(f.server->port());
  // The job completes while they are connected.
  f.run_job(4);
  EXPECT_TRUE(closed_by_server(garbage.get(), 5));
  EXPECT_TRUE(closed_by_server(oversized.get(), 5));
  EXPECT_TRUE(closed_by_server(version.get(), 5));
  EXPECT_TRUE(closed_by_server(silent.get(), 5));
  wait_rejected(*f.server, 4);
  EXPECT_EQ(f.server->rejected(), 4);
}

TEST(RendezvousServer, DuplicateAndOutOfRangeRanksAreRefused) {
  Fixture f(2);
  Client a = f.connect();
  auto reg_a = std::async(std::launch::async, [&] { return a.register_rank({0, 2, "h", "127.0.0.1", 1}, in(10)); });
  ASSERT_TRUE(wait_registered(*f.server, 1));  // rank 0 from host h first, then the duplicate
  Client dup = f.connect();
  auto d = dup.register_rank({0, 2, "h2", "127.0.0.1", 2}, in(10));
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.error().message.find("rank 0 is already registered (from host h)"), std::string::npos)
      << d.error().message;
  Client out = f.connect();
  auto o = out.register_rank({5, 2, "h", "127.0.0.1", 3}, in(10));
  ASSERT_FALSE(o.ok());
  EXPECT_NE(o.error().message.find("rank 5 is out of range"), std::string::npos);
  Client wrong_size = f.connect();
  auto w = wrong_size.register_rank({1, 3, "h", "127.0.0.1", 3}, in(10));
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.error().message.find("says the job has 3 ranks; hvdrun started 2"), std::string::npos);
  Client b = f.connect();
  auto rb = b.register_rank({1, 2, "h", "127.0.0.1", 4}, in(10));
  ASSERT_TRUE(rb.ok()) << rb.error().message;
  ASSERT_TRUE(reg_a.get().ok());
}

TEST(RendezvousServer, KeyValueSemantics) {
  Fixture f(1);
  Client c = f.connect();
  auto missing = c.get("nope");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().kind, ErrorKind::kMissingKey);
  ASSERT_TRUE(c.set("k", "v1").ok());
  ASSERT_TRUE(c.set("k", "v2").ok());  // overwrite
  EXPECT_EQ(*c.get("k"), "v2");
  EXPECT_EQ(*c.add("ctr", 5), 5);
  EXPECT_EQ(*c.add("ctr", -2), 3);
  EXPECT_EQ(*c.get("ctr"), "3");
  EXPECT_FALSE(c.add("k", 1).ok());  // not an integer: an error, and the connection is closed
  Client d = f.connect();
  EXPECT_TRUE(d.wait({"k", "ctr"}, 1).ok());  // present already
  auto t = d.wait({"k", "later", "never"}, 0.2);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.error().kind, ErrorKind::kTimeout);
  EXPECT_NE(t.error().message.find("later, never"), std::string::npos) << t.error().message;
  // A wait is satisfied by another client's set.
  auto waiter = std::async(std::launch::async, [&] { return d.wait({"a", "b"}, 10); });
  Client e = f.connect();
  ASSERT_TRUE(e.set("a", "1").ok());
  ASSERT_TRUE(e.set("b", "2").ok());
  EXPECT_TRUE(waiter.get().ok());
}

TEST(RendezvousServer, NcclUniqueIdRelay) {
  const int n = 4;
  Fixture f(n);
  std::string uid(kNcclUniqueIdBytes, '\0');
  for (size_t i = 0; i < uid.size(); ++i) uid[i] = static_cast<char>(255 - i);
  std::vector<std::future<std::string>> got;
  for (int r = 1; r < n; ++r)
    got.push_back(std::async(std::launch::async, [&]() -> std::string {
      Client c = f.connect();
      auto w = c.wait({kNcclUniqueIdKey}, 10);
      if (!w) return "wait: " + w.error().message;
      auto v = c.get(kNcclUniqueIdKey);
      return v ? *v : "get: " + v.error().message;
    }));
  ASSERT_TRUE(wait_waiting(*f.server, n - 1));  // every other rank waits before the root sets
  Client root = f.connect();
  ASSERT_TRUE(root.set(kNcclUniqueIdKey, uid).ok());
  for (auto& g : got) EXPECT_EQ(g.get(), uid);
}

TEST(RendezvousServer, StartTimeoutNamesTheMissingRanks) {
  Fixture f(4, /*start_timeout=*/0.3);
  f.server->begin_start_timer();
  std::vector<Client> clients;
  std::vector<std::future<Result<Registered>>> regs;
  clients.push_back(f.connect());
  clients.push_back(f.connect());
  for (size_t i = 0; i < clients.size(); ++i) {
    int r = i == 0 ? 0 : 2;
    regs.push_back(std::async(std::launch::async, [&, i, r] {
      return clients[i].register_rank({r, 4, "h", "127.0.0.1", 1}, in(2));
    }));
  }
  for (auto& g : regs) EXPECT_FALSE(g.get().ok());  // the job never completes
  std::lock_guard<std::mutex> lk(f.mu);
  ASSERT_EQ(f.timeouts.size(), 1u);
  std::string endpoint = "127.0.0.1:" + std::to_string(f.server->port());
  EXPECT_EQ(f.timeouts[0],
            "hvdrun: rank 1 (host host0, local rank 1) did not reach the rendezvous at " + endpoint + " within 0.3 s\n"
            "hvdrun: rank 3 (host host1, local rank 1) did not reach the rendezvous at " + endpoint + " within 0.3 s");
}

TEST(RendezvousServer, StartTimeoutMessageListsTheFirstFewThenACount) {
  std::vector<ExpectedRank> ranks(20, {"n", 0});
  std::vector<int> missing;
  for (int i = 0; i < 20; ++i) missing.push_back(i);
  std::string m = start_timeout_message(missing, ranks, "a:1", 30, 8);
  EXPECT_EQ(std::count(m.begin(), m.end(), '\n'), 8);
  EXPECT_NE(m.find("... and 12 more ranks did not reach it"), std::string::npos);
}

TEST(RendezvousServer, BarrierWaitsForEveryPartyAndTimesOut) {
  Fixture f(1);
  Client a = f.connect();
  auto t = a.barrier("lonely", 2, 0.2);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.error().kind, ErrorKind::kTimeout);
  Client b = f.connect(), c = f.connect();
  auto first = std::async(std::launch::async, [&] { return b.barrier("pair", 2, 10); });
  ASSERT_TRUE(wait_waiting(*f.server, 1));
  EXPECT_EQ(first.wait_for(std::chrono::milliseconds(0)), std::future_status::timeout) << "returned before the 2nd";
  ASSERT_TRUE(c.barrier("pair", 2, 10).ok());
  EXPECT_TRUE(first.get().ok());
  EXPECT_EQ(*c.get("pair/done"), "1");
}

TEST(RendezvousServer, FatalErrorReachesTheLauncher) {
  Fixture f(1);
  Client c = f.connect();
  ASSERT_TRUE(c.register_rank({0, 1, "h", "127.0.0.1", 1}, in(5)).ok());
  ASSERT_TRUE(c.report_fatal("allreduce: rank 1 (host b) died").ok());
  std::lock_guard<std::mutex> lk(f.mu);
  ASSERT_EQ(f.fatal.size(), 1u);
  EXPECT_EQ(f.fatal[0], "0: allreduce: rank 1 (host b) died");
}

TEST(RendezvousServer, DroppedConnectionIsAnErrorNotAHang) {
  auto f = std::make_unique<Fixture>(2);
  Client c = f->connect();
  auto waiting = std::async(std::launch::async, [&] { return c.wait({"never"}, 30); });
  ASSERT_TRUE(wait_waiting(*f->server, 1));  // the wait is on the server when it goes
  f.reset();  // hvdrun goes away
  ASSERT_EQ(waiting.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  auto s = waiting.get();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("connection lost"), std::string::npos) << s.error().message;
}

TEST(RendezvousServer, ConnectRetriesUntilTheServerAppears) {
  // Nothing listens yet: the client backs off and retries until its deadline. The port is
  // held bound (not listening) so that no other test's server can take it meanwhile.
  UniqueFd held(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(held.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
  socklen_t salen = sizeof sa;
  ASSERT_EQ(getsockname(held.get(), reinterpret_cast<sockaddr*>(&sa), &salen), 0);
  auto start = Clock::now();
  auto c = Client::connect("127.0.0.1", ntohs(sa.sin_port), new_secret(), in(0.3));
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message.find("connect"), std::string::npos);
  EXPECT_GE(Clock::now() - start, std::chrono::milliseconds(250));
}

// A rank that failed on a peer's closed connection names it under hvdrun/lost/<its rank>:
// hvdrun hears of it; another rank's key, a value that names no rank, or an unregistered
// connection is stored and not acted on.
TEST(RendezvousServer, ALostPeerReportReachesHvdrunOnlyForTheRanksOwnKey) {
  Fixture f(2);
  Client a = f.connect(), b = f.connect();
  auto reg_a = std::async(std::launch::async, [&] { return a.register_rank({0, 2, "h", "127.0.0.1", 1}, in(10)); });
  ASSERT_TRUE(b.register_rank({1, 2, "h", "127.0.0.1", 2}, in(10)).ok());
  ASSERT_TRUE(reg_a.get().ok());
  ASSERT_TRUE(a.set(std::string(kLostKeyPrefix) + "0", "1", 5).ok());
  ASSERT_TRUE(a.set(std::string(kLostKeyPrefix) + "1", "0").ok());   // not its own key
  ASSERT_TRUE(b.set(std::string(kLostKeyPrefix) + "1", "abc").ok());  // names no rank
  ASSERT_TRUE(b.set(std::string(kLostKeyPrefix) + "1", "7").ok());    // no such rank
  Client stranger = f.connect();                                      // never registered
  ASSERT_TRUE(stranger.set(std::string(kLostKeyPrefix) + "0", "1").ok());
  ASSERT_TRUE(b.set(std::string(kLostKeyPrefix) + "1", "0").ok());
  std::lock_guard<std::mutex> lk(f.mu);
  EXPECT_EQ(f.lost, (std::vector<std::string>{"0->1", "1->0"}));
}

TEST(RendezvousServer, StressManyThreadsAddAndBarrier) {
  const int n = 32, adds = 50;
  Fixture f(n);
  std::vector<std::future<std::string>> futs;
  for (int r = 0; r < n; ++r)
    futs.push_back(std::async(std::launch::async, [&, r]() -> std::string {
      auto c = Client::connect("127.0.0.1", f.server->port(), f.secret, in(20));
      if (!c) return c.error().message;
      if (auto g = c->register_rank({r, n, "h", "127.0.0.1", r + 1}, in(20)); !g) return g.error().message;
      for (int i = 0; i < adds; ++i)
        if (auto a = c->add("total", 1); !a) return a.error().message;
      for (int b = 0; b < 5; ++b)
        if (auto s = c->barrier("stress/" + std::to_string(b), n, 20); !s) return s.error().message;
      auto total = c->get("total");
      if (!total) return total.error().message;
      if (*total != std::to_string(n * adds)) return "total " + *total;
      for (int p = 0; p < n; p += 7) {
        auto peer = c->get_peer(p, in(5));
        if (!peer || peer->port != p + 1) return "get_peer";
      }
      return "";
    }));
  for (auto& fu : futs) EXPECT_EQ(fu.get(), "");
}

// Issue 16.1: 150 values of 4 MiB grew hvdrun to 633 MB.
TEST(RendezvousServer, KeyValueStoreIsBounded) {
  Fixture f(1);
  {
    Client c = f.connect();
    auto s = c.set("big", std::string(kMaxValueBytes + 1, 'v'));
    ASSERT_FALSE(s.ok());
    EXPECT_TRUE(contains(s.error().message, "value of 1048577 bytes for key 'big' exceeds the limit of 1048576 bytes"))
        << s.error().message;
  }
  Client c = f.connect();
  const std::string value(kMaxValueBytes, 'v');
  int stored = 0;
  Status last;
  for (int i = 0; i < 100; ++i) {
    last = c.set("v" + std::to_string(i), value);
    if (!last) break;
    ++stored;
  }
  ASSERT_FALSE(last.ok()) << "100 MiB stored";
  EXPECT_EQ(stored, static_cast<int>(kMaxStoreBytes / (kMaxValueBytes + 64)));
  EXPECT_TRUE(contains(last.error().message, "over its limit of 67108864 bytes")) << last.error().message;
  // What is stored stays readable; overwriting a value does not count it twice.
  Client d = f.connect();
  auto v0 = d.get("v0");
  ASSERT_TRUE(v0.ok());
  EXPECT_EQ(v0->size(), kMaxValueBytes);
  EXPECT_TRUE(d.set("v0", value).ok());
  EXPECT_TRUE(d.set("v0", "small").ok());
  EXPECT_TRUE(d.set("new", value).ok()) << "the space freed by overwriting v0 is usable";
  server_still_serves(f);
}

namespace {

// Captures what spdlog's default logger writes while it lives.
struct LogCapture {
  std::ostringstream out;
  std::shared_ptr<spdlog::sinks::ostream_sink_mt> sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out);
  LogCapture() { spdlog::default_logger()->sinks().push_back(sink); }
  ~LogCapture() { spdlog::default_logger()->sinks().pop_back(); }
  int count(const std::string& part) {
    sink->flush();
    std::string all = out.str();
    int n = 0;
    for (size_t pos = all.find(part); pos != std::string::npos; pos = all.find(part, pos + 1)) ++n;
    return n;
  }
};

double cpu_seconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

int open_fds() {
  int n = 0;
  DIR* d = opendir("/proc/self/fd");
  while (d && readdir(d)) ++n;
  if (d) closedir(d);
  return n - 3;  // ".", ".." and the directory's own fd
}

}  // namespace

// Issue 16.8: 22,000 refused connections gave 22,000 log lines.
TEST(RendezvousServer, RepeatedRefusalsAreOneLinePlusACount) {
  LogCapture log;
  Fixture f(1);
  const int n = 200;
  for (int i = 0; i < n; ++i) {
    UniqueFd fd = raw_connect(f.server->port());
    std::string junk = "GET / HTTP/1.1\r\n\r\n";
    ASSERT_GT(write(fd.get(), junk.data(), junk.size()), 0);
    ASSERT_TRUE(closed_by_server(fd.get(), 5));
  }
  wait_rejected(*f.server, n);
  EXPECT_EQ(f.server->rejected(), n);
  f.server.reset();  // the counts come out at the end at the latest
  EXPECT_EQ(log.count("refused connection from"), 1) << log.out.str().substr(0, 2000);
  EXPECT_EQ(log.count("rendezvous: " + std::to_string(n - 1) + " more like this: refused connection: "), 1)
      << log.out.str().substr(0, 2000);
}

// Issue 16.8: out of descriptors, the accept loop spun at 100% CPU.
TEST(RendezvousServer, AcceptBacksOffWhenOutOfDescriptors) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  // The sanitizer runtimes need descriptors of their own (UBSan's type checks fail inside
  // spdlog once every descriptor is taken): this runs in the plain build only.
  GTEST_SKIP() << "descriptor exhaustion breaks the sanitizer runtime itself";
#endif
  LogCapture log;
  Fixture f(1);
  rlimit old{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &old), 0);
  rlimit tight = old;
  tight.rlim_cur = static_cast<rlim_t>(open_fds() + 16);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &tight), 0);
  std::vector<UniqueFd> fillers;  // every free descriptor taken but one, for the client
  while (true) {
    UniqueFd d(::open("/dev/null", O_RDONLY | O_CLOEXEC));
    if (!d.valid()) break;
    fillers.push_back(std::move(d));
  }
  ASSERT_FALSE(fillers.empty());
  fillers.pop_back();
  UniqueFd fd = raw_connect(f.server->port());  // queued; the server cannot accept it
  double cpu0 = cpu_seconds();
  std::this_thread::sleep_for(std::chrono::seconds(1));
  double used = cpu_seconds() - cpu0;
  fillers.clear();
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &old), 0);
  EXPECT_LT(used, 0.25) << "the accept loop spun";
  EXPECT_GE(log.count("cannot accept a connection: Too many open files"), 1) << log.out.str().substr(0, 2000);
  EXPECT_LE(log.count("cannot accept a connection"), 2) << log.out.str().substr(0, 2000);
  // With descriptors again, the queued connection is served (refused here: it says nothing).
  std::string hello = encode_frame(MsgType::kHello, random_bytes(kNonceBytes));
  ASSERT_EQ(write(fd.get(), hello.data(), hello.size()), static_cast<ssize_t>(hello.size()));
  char hdr[4];
  pollfd p{fd.get(), POLLIN, 0};
  ASSERT_EQ(poll(&p, 1, 5000), 1) << "the queued connection was never accepted";
  EXPECT_EQ(read(fd.get(), hdr, 4), 4);
  server_still_serves(f);
}

// What workers send (keys, host names) reaches hvdrun's terminal only quoted.
TEST(RendezvousServer, WorkerBytesInWarningsAreQuoted) {
  LogCapture log;
  Fixture f(1);
  Client d = f.connect();
  ASSERT_TRUE(d.set(std::string("\x1b[2J", 4), "x").ok());
  EXPECT_FALSE(d.add(std::string("\x1b[2J", 4), 1).ok());
  f.server.reset();
  std::string all = log.out.str();
  EXPECT_EQ(all.find('\x1b'), std::string::npos) << all;
  EXPECT_NE(all.find("key '\\x1b[2J' holds 'x'"), std::string::npos) << all;
}


// Elastic rounds (docs/ELASTIC.md): the server's table follows hvdrun's begin_round; the
// callbacks report ranks of the current round only.
namespace {

std::vector<ExpectedRank> round_ranks(int n) {
  std::vector<ExpectedRank> r;
  for (int i = 0; i < n; ++i) r.push_back({"h" + std::to_string(i), 0});
  return r;
}

std::string reg(int rank, int size, int round, int port = 1000) {
  RegisterRequest q{rank, size, "h" + std::to_string(rank), "127.0.0.1", port + rank};
  q.round = round;
  return encode_register(q);
}

struct ElasticFixture {
  std::string secret = new_secret();
  std::mutex mu;
  std::condition_variable cv;
  std::vector<int> left;
  std::vector<std::pair<int, int>> registered;  // (round, rank) told by on_elastic_registered
  // Declared last, destroyed first: its thread calls on_rank_left, which uses the above.
  std::unique_ptr<Server> server;
  ElasticFixture() {
    ServerOptions o;
    o.secret = secret;
    o.start_timeout = 0;
    o.ranks = round_ranks(1);
    ServerCallbacks cb;
    cb.on_rank_left = [this](int rank) {
      std::lock_guard<std::mutex> lk(mu);
      left.push_back(rank);
      cv.notify_all();
    };
    cb.on_elastic_registered = [this](int round, int rank) {
      std::lock_guard<std::mutex> lk(mu);
      registered.emplace_back(round, rank);
    };
    auto s = Server::start(o, cb);
    EXPECT_TRUE(s.ok());
    server = std::move(*s);
  }
  Client connect_client() {
    auto c = Client::connect("127.0.0.1", server->port(), secret, in(10));
    EXPECT_TRUE(c.ok());
    return std::move(*c);
  }
  // The ranks that left, once there are `n` (at most 10 s).
  std::vector<int> wait_left(size_t n) {
    std::unique_lock<std::mutex> lk(mu);
    cv.wait_for(lk, std::chrono::seconds(10), [&] { return left.size() >= n; });
    return left;
  }
};

int64_t stale_round_of(const Frame& f) {
  EXPECT_EQ(f.type, MsgType::kStaleRound) << msg_type_name(f.type);
  auto v = decode_i64(f.payload);
  return v ? *v : -1;
}

}  // namespace

TEST(RendezvousServerElastic, AStaleRegisterIsToldTheRoundAndTheTableIsResized) {
  ElasticFixture f;
  f.server->begin_round(1, round_ranks(2));
  EXPECT_EQ(f.server->round(), 1);
  RawSession waiting(f.server->port(), f.secret);
  waiting.send(MsgType::kRegister, reg(0, 2, 1));
  ASSERT_TRUE(wait_registered(*f.server, 1));  // registered in round 1, waiting for rank 1
  f.server->begin_round(2, round_ranks(3));
  EXPECT_EQ(f.server->registered(), 0);
  EXPECT_EQ(stale_round_of(waiting.recv()), 2);  // its round ended before it completed
  waiting.send(MsgType::kRegister, reg(0, 2, 1));  // the connection stays open
  EXPECT_EQ(stale_round_of(waiting.recv()), 2);
  RawSession future(f.server->port(), f.secret);
  future.send(MsgType::kRegister, reg(1, 3, 3));  // a round that has not begun
  EXPECT_EQ(stale_round_of(future.recv()), 2);
  RawSession old_size(f.server->port(), f.secret);
  old_size.send(MsgType::kRegister, reg(1, 2, 2));
  EXPECT_TRUE(contains(old_size.error(), "says the job has 2 ranks; hvdrun started 3"));
  // Round 2 completes with three ranks, the first two on connections told it was stale.
  waiting.send(MsgType::kRegister, reg(0, 3, 2));
  future.send(MsgType::kRegister, reg(1, 3, 2));
  RawSession third(f.server->port(), f.secret);
  third.send(MsgType::kRegister, reg(2, 3, 2));
  for (RawSession* s : {&waiting, &future, &third}) {
    Frame g = s->recv();
    ASSERT_EQ(g.type, MsgType::kRegistered) << msg_type_name(g.type);
    auto d = decode_registered(g.payload);
    ASSERT_TRUE(d.ok());
    EXPECT_EQ(d->size, 3);
  }
  EXPECT_EQ(f.server->registered(), 3);
  std::lock_guard<std::mutex> lk(f.mu);  // each told before the round's kRegistered went out
  auto told = f.registered;
  std::sort(told.begin(), told.end());
  EXPECT_EQ(told, (std::vector<std::pair<int, int>>{{1, 0}, {2, 0}, {2, 1}, {2, 2}}));
}

// A connection whose round is over asks for a peer's address: the table is the next
// round's (its rank 0 another process), so it is told the round, as a stale register is,
// and the client returns kReset (hvd_init joins the next round) instead of that address.
TEST(RendezvousServerElastic, APeerAskedForOnAConnectionOfAnEndedRoundIsToldTheRound) {
  ElasticFixture f;
  f.server->begin_round(1, round_ranks(1));
  auto old = Client::connect("127.0.0.1", f.server->port(), f.secret, in(10));
  ASSERT_TRUE(old.ok()) << old.error().message;
  RegisterRequest q{0, 1, "h0", "127.0.0.1", 1000};
  q.round = 1;
  ASSERT_TRUE(old->register_rank(q, in(10)).ok());
  auto mine = old->get_peer(0, in(10));
  ASSERT_TRUE(mine.ok()) << mine.error().message;
  EXPECT_EQ(mine->port, 1000);
  f.server->begin_round(2, round_ranks(1));
  RawSession next(f.server->port(), f.secret);
  next.send(MsgType::kRegister, reg(0, 1, 2, 2000));
  ASSERT_EQ(next.recv().type, MsgType::kRegistered);
  auto stale = old->get_peer(0, in(10));
  ASSERT_FALSE(stale.ok());
  EXPECT_EQ(stale.error().kind, ErrorKind::kReset);
  EXPECT_EQ(stale.error().message, "rendezvous: this worker's elastic round is over (the job is at round 2)");
  next.send(MsgType::kGetPeer, encode_i64(0));  // the round's own connection: its address
  Frame p = next.recv();
  ASSERT_EQ(p.type, MsgType::kPeer) << msg_type_name(p.type);
  EXPECT_EQ(decode_peer(p.payload)->port, 2000);
}

TEST(RendezvousServerElastic, ARegisterWithoutARoundIsRefusedInAnElasticJob) {
  ElasticFixture f;
  f.server->begin_round(1, round_ranks(1));
  RawSession s(f.server->port(), f.secret);
  s.send(MsgType::kRegister, reg(0, 1, 0));
  EXPECT_TRUE(contains(s.error(), "rank 0 registered with no elastic round; this is an elastic job (round 1)"));
  Fixture plain(1);  // and a round in a job that is not elastic
  RawSession p(plain.server->port(), plain.secret);
  p.send(MsgType::kRegister, reg(0, 1, 1));
  EXPECT_TRUE(contains(p.error(), "registered for elastic round 1; this job is not elastic"));
}

TEST(RendezvousServerElastic, OnlyTheCurrentRoundsRanksAreReportedLeaving) {
  ElasticFixture f;
  f.server->begin_round(1, round_ranks(2));
  RawSession kept(f.server->port(), f.secret);
  auto gone = std::make_unique<RawSession>(f.server->port(), f.secret);
  kept.send(MsgType::kRegister, reg(0, 2, 1));
  gone->send(MsgType::kRegister, reg(1, 2, 1));
  ASSERT_EQ(kept.recv().type, MsgType::kRegistered);
  ASSERT_EQ(gone->recv().type, MsgType::kRegistered);
  f.server->begin_round(2, round_ranks(2));
  // Round 1's rank 0 registers again on its connection (hvd_shutdown, hvd_init); round 1's
  // rank 1 leaves: it is not round 2's rank 1, nothing is reported.
  kept.send(MsgType::kRegister, reg(0, 2, 2));
  ASSERT_TRUE(wait_registered(*f.server, 1));
  gone.reset();
  RawSession fresh(f.server->port(), f.secret);
  fresh.send(MsgType::kRegister, reg(1, 2, 2));
  ASSERT_EQ(kept.recv().type, MsgType::kRegistered);
  ASSERT_EQ(fresh.recv().type, MsgType::kRegistered);
  ::shutdown(kept.fd.get(), SHUT_RDWR);  // round 2's rank 0 leaves without hvd_shutdown
  EXPECT_EQ(f.wait_left(1), std::vector<int>{0});
}

TEST(RendezvousServerElastic, HvdrunsSetWakesTheWaitersInOrder) {
  ElasticFixture f;
  Client c = f.connect_client();
  auto waited = std::async(std::launch::async, [&] { return c.wait({"hvdrun/elastic/update/1"}, 10); });
  ASSERT_TRUE(wait_waiting(*f.server, 1));
  ASSERT_TRUE(f.server->set("hvdrun/elastic/round", "2").ok());
  ASSERT_TRUE(f.server->set("hvdrun/elastic/update/1", "2 1").ok());
  ASSERT_EQ(waited.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_TRUE(waited.get().ok());
  auto v = c.get("hvdrun/elastic/round");
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, "2");
  auto big = f.server->set("k", std::string(kMaxValueBytes + 1, 'x'));
  ASSERT_FALSE(big.ok());
  EXPECT_TRUE(contains(big.error().message, "exceeds the limit"));
}

}  // namespace hvdrun::rdv
