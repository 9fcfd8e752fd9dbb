// hvdrun --horovod: Horovod's Gloo rendezvous store served over HTTP
// (rendezvous/horovod_http) in the rendezvous server, with real sockets, spoken to with the
// bytes Horovod 0.28.1's client (third_party/HTTPRequest, used by common/gloo/http_store.cc)
// sends: "METHOD /scope/key HTTP/1.1\r\nHost: ADDR\r\nContent-Length: N\r\n\r\nBODY".
#include "rendezvous/horovod_http.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <gtest/gtest.h>
#include <thread>

#include "common/unique_fd.h"
#include "rendezvous/auth.h"
#include "rendezvous/horovod_store.h"
#include "rendezvous/server.h"

namespace hvdrun::rdv {
namespace {

using std::chrono::steady_clock;

struct Reply {
  int status = 0;  // 0: no answer (closed or timed out)
  std::string head, body;
  double seconds = 0;
};

Reply parse_reply(const std::string& raw, double seconds) {
  Reply r;
  r.seconds = seconds;
  size_t end = raw.find("\r\n\r\n");
  if (raw.rfind("HTTP/1.1 ", 0) != 0 || end == std::string::npos) return r;
  r.status = std::atoi(raw.c_str() + 9);
  r.head = raw.substr(0, end);
  r.body = raw.substr(end + 4);
  return r;
}

UniqueFd connect_from(int port, const char* source = nullptr) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  EXPECT_TRUE(fd.valid());
  sockaddr_in a{};
  a.sin_family = AF_INET;
  if (source) {
    inet_pton(AF_INET, source, &a.sin_addr);
    EXPECT_EQ(::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0) << strerror(errno);
  }
  a.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  EXPECT_EQ(::connect(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0) << strerror(errno);
  return fd;
}

void send_all(int fd, const std::string& data) {
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n = ::send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return;  // the server may close early (an error answer): the reply says
    off += static_cast<size_t>(n);
  }
}

// Reads until the server closes, or `timeout` s.
Reply read_reply(int fd, double timeout, steady_clock::time_point t0 = steady_clock::now()) {
  std::string raw;
  auto deadline = steady_clock::now() + std::chrono::duration_cast<steady_clock::duration>(std::chrono::duration<double>(timeout));
  char buf[65536];
  while (true) {
    int left = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - steady_clock::now()).count());
    if (left <= 0) break;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, left) <= 0) break;
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    raw.append(buf, static_cast<size_t>(n));
  }
  return parse_reply(raw, std::chrono::duration<double>(steady_clock::now() - t0).count());
}

// One request as Horovod's client sends it.
std::string horovod_request(const std::string& method, const std::string& path, const std::string& body = "") {
  return method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\n\r\n" + body;
}

struct Served {
  std::unique_ptr<Server> server;
  explicit Served(int size, HorovodServing hs = {}) {
    ServerOptions o;
    o.secret = new_secret();
    o.start_timeout = 0;
    for (int r = 0; r < size; ++r) o.ranks.push_back({"node" + std::to_string(r / 2), r % 2});
    hs.enabled = true;
    o.horovod = hs;
    auto s = Server::start(o, {});
    EXPECT_TRUE(s.ok()) << (s.ok() ? "" : s.error().message);
    if (s.ok()) server = std::move(*s);
  }
  Reply request(const std::string& raw, double timeout = 10) {
    auto fd = connect_from(server->horovod_port());
    send_all(fd.get(), raw);
    return read_reply(fd.get(), timeout);
  }
};

TEST(HorovodHttp, NotServedUnlessAsked) {
  ServerOptions o;
  o.secret = new_secret();
  o.ranks.push_back({"h", 0});
  auto s = Server::start(o, {});
  ASSERT_TRUE(s.ok());
  EXPECT_EQ((*s)->horovod_port(), 0);
}

TEST(HorovodHttp, PutThenGetAsHorovodsClient) {
  Served sv(2);
  ASSERT_GT(sv.server->horovod_port(), 0);
  EXPECT_NE(sv.server->horovod_port(), sv.server->port());
  std::string value("\x01\x00\xffgloo-address", 15);
  Reply put = sv.request(horovod_request("PUT", "/global/0", value));
  EXPECT_EQ(put.status, 200) << put.head;
  EXPECT_NE(put.head.find("Content-Length: 0"), std::string::npos) << put.head;
  Reply get = sv.request(horovod_request("GET", "/global/0"));
  EXPECT_EQ(get.status, 200) << get.head;
  // Horovod's client reads "Content-Length" (this spelling) to know where the body ends.
  EXPECT_NE(get.head.find("Content-Length: 15"), std::string::npos) << get.head;
  EXPECT_EQ(get.body, value);
}

TEST(HorovodHttp, GetOfAMissingKeyIs404) {
  Served sv(2);
  Reply r = sv.request(horovod_request("GET", "/global/rank_1"));
  EXPECT_EQ(r.status, 404) << r.head;
  EXPECT_NE(r.head.find("Content-Length: 0"), std::string::npos) << r.head;
  EXPECT_EQ(r.body, "");
}

TEST(HorovodHttp, DeleteOfEveryRankDropsTheScope) {
  Served sv(4);  // node0: ranks 0, 1; node1: ranks 2, 3
  ASSERT_EQ(sv.request(horovod_request("PUT", "/local_node0/0", "a")).status, 200);
  ASSERT_EQ(sv.request(horovod_request("PUT", "/local_node0/1", "b")).status, 200);
  ASSERT_EQ(sv.request(horovod_request("PUT", "/global/0", "g")).status, 200);
  EXPECT_EQ(sv.request(horovod_request("DELETE", "/local_node0/0")).status, 200);
  EXPECT_EQ(sv.request(horovod_request("GET", "/local_node0/1")).status, 200);
  EXPECT_EQ(sv.request(horovod_request("DELETE", "/local_node0/1")).status, 200);
  EXPECT_EQ(sv.request(horovod_request("GET", "/local_node0/0")).status, 404);
  EXPECT_EQ(sv.request(horovod_request("GET", "/local_node0/1")).status, 404);
  EXPECT_EQ(sv.request(horovod_request("GET", "/global/0")).body, "g");  // needs 4 ranks
}

TEST(HorovodHttp, OversizeValueIs413) {
  HorovodServing hs;
  hs.limits.max_value_bytes = 1024;
  Served sv(1, hs);
  // The header announces too much: refused before the body is read.
  auto fd = connect_from(sv.server->horovod_port());
  send_all(fd.get(), "PUT /global/0 HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2048\r\n\r\n");
  Reply r = read_reply(fd.get(), 10);
  EXPECT_EQ(r.status, 413) << r.head;
  EXPECT_NE(r.body.find("limit of 1024 bytes"), std::string::npos) << r.body;
  EXPECT_EQ(sv.request(horovod_request("GET", "/global/0")).status, 404);
  EXPECT_EQ(sv.request(horovod_request("PUT", "/global/0", std::string(1024, 'v'))).status, 200);
  EXPECT_GE(sv.server->horovod_refused(), 1);
}

TEST(HorovodHttp, BadMethodPathAndGarbageAreClearErrors) {
  Served sv(1);
  Reply post = sv.request(horovod_request("POST", "/global/0", "x"));
  EXPECT_EQ(post.status, 405);
  EXPECT_NE(post.head.find("Allow: GET, PUT, DELETE"), std::string::npos) << post.head;
  Reply path = sv.request(horovod_request("GET", "/a/b/c"));
  EXPECT_EQ(path.status, 400);
  EXPECT_NE(path.body.find("expected /SCOPE/KEY"), std::string::npos) << path.body;
  EXPECT_EQ(sv.request(horovod_request("PUT", "/global", "x")).status, 400);
  const char tls[] = "\x16\x03\x01\x02\x00 not http at all\r\n\r\n";
  Reply garbage = sv.request(std::string(tls, sizeof tls - 1));
  EXPECT_EQ(garbage.status, 400);
  EXPECT_NE(garbage.body.find("malformed HTTP request"), std::string::npos) << garbage.body;
  Reply nolen = sv.request("PUT /global/0 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
  EXPECT_EQ(nolen.status, 411);
  Reply header = sv.request("GET /global/0 HTTP/1.1\r\nX: " + std::string(10000, 'h') + "\r\n\r\n");
  EXPECT_EQ(header.status, 431);
  Reply named = sv.request("GET /global/0 HTTP/1.1\r\nHost: attacker.example:80\r\n\r\n");
  EXPECT_EQ(named.status, 400);
  EXPECT_NE(named.body.find("a host name is refused"), std::string::npos) << named.body;
  // And the store still answers.
  EXPECT_EQ(sv.request(horovod_request("PUT", "/global/0", "ok")).status, 200);
  EXPECT_EQ(sv.request(horovod_request("GET", "/global/0")).body, "ok");
}

TEST(HorovodHttp, ANonJobPeerIsRefused) {
  HorovodServing hs;
  hs.allow_loopback = false;
  hs.allowed_peers = {"127.0.0.2"};
  Served sv(1, hs);
  auto fd = connect_from(sv.server->horovod_port(), "127.0.0.1");
  send_all(fd.get(), horovod_request("PUT", "/global/0", "x"));
  Reply r = read_reply(fd.get(), 10);
  EXPECT_EQ(r.status, 403) << r.head;
  EXPECT_NE(r.body.find("only the hosts of its job"), std::string::npos) << r.body;
  auto ok = connect_from(sv.server->horovod_port(), "127.0.0.2");
  send_all(ok.get(), horovod_request("GET", "/global/0"));
  EXPECT_EQ(read_reply(ok.get(), 10).status, 404);  // not stored by the refused peer
  EXPECT_EQ(sv.server->horovod_refused(), 1);
}

TEST(HorovodHttp, SlowClientGets408AndOthersAreServedMeanwhile) {
  const std::string partial = "PUT /global/0 HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc";  // and no more
  {
    // Answered while the slow one is still being read (a server serving one connection at a
    // time would answer it only after the slow one's 30 s; read_reply gives up at 10).
    HorovodServing hs;
    hs.request_timeout = 30;
    Served sv(1, hs);
    auto slow = connect_from(sv.server->horovod_port());
    send_all(slow.get(), partial);
    EXPECT_EQ(sv.request(horovod_request("GET", "/global/0")).status, 404);
    pollfd p{slow.get(), POLLIN, 0};
    EXPECT_EQ(::poll(&p, 1, 0), 0) << "the slow one was answered first";
  }
  HorovodServing hs;
  hs.request_timeout = 1;
  Served sv(1, hs);
  auto t0 = steady_clock::now();
  auto slow = connect_from(sv.server->horovod_port());
  send_all(slow.get(), partial);
  Reply r = read_reply(slow.get(), 10, t0);
  EXPECT_EQ(r.status, 408) << r.head;
  EXPECT_GE(r.seconds, 0.9);  // not before its request_timeout
  EXPECT_EQ(sv.request(horovod_request("GET", "/global/0")).status, 404);  // the partial PUT stored nothing
}

// At the cap, a new connection closes the oldest one still reading a request.
TEST(HorovodHttp, ConnectionsAboveTheCapCloseTheOldestStillReading) {
  HorovodServing hs;
  hs.request_timeout = 1;
  hs.max_connections = 2;
  Served sv(1, hs);
  auto a = connect_from(sv.server->horovod_port());
  send_all(a.get(), "GET /glo");
  auto b = connect_from(sv.server->horovod_port());
  send_all(b.get(), "GET /glo");
  EXPECT_EQ(sv.request(horovod_request("GET", "/global/0")).status, 404);  // b was accepted before this
  Reply ra = read_reply(a.get(), 10);
  EXPECT_EQ(ra.status, 0) << ra.head;  // closed without an answer
  EXPECT_EQ(read_reply(b.get(), 10).status, 408);
}

TEST(HorovodHttp, ManyClientsAtOnce) {
  Served sv(8);
  std::vector<std::thread> ts;
  std::atomic<int> ok{0};
  for (int r = 0; r < 8; ++r)
    ts.emplace_back([&, r] {
      for (int i = 0; i < 20; ++i) {
        std::string k = "/global/" + std::to_string(r) + "_" + std::to_string(i);
        auto fd = connect_from(sv.server->horovod_port());
        send_all(fd.get(), horovod_request("PUT", k, std::to_string(i)));
        if (read_reply(fd.get(), 10).status != 200) return;
        auto g = connect_from(sv.server->horovod_port());
        send_all(g.get(), horovod_request("GET", k));
        if (read_reply(g.get(), 10).body != std::to_string(i)) return;
      }
      ok++;
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(ok.load(), 8);
}

// ---- Bounds and fairness over real sockets ------------------------------------------

UniqueFd connect_small_window(int port) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  int small = 4096;
  EXPECT_EQ(::setsockopt(fd.get(), SOL_SOCKET, SO_RCVBUF, &small, sizeof small), 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  EXPECT_EQ(::connect(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0) << strerror(errno);
  return fd;
}

// Asks until the answer is `want` (the server sees a client go away asynchronously).
int request_until(Served& sv, const std::string& raw, int want, double seconds = 20) {
  auto deadline = steady_clock::now() + std::chrono::duration_cast<steady_clock::duration>(std::chrono::duration<double>(seconds));
  int got = 0;
  do {
    got = sv.request(raw).status;
  } while (got != want && steady_clock::now() < deadline);
  return got;
}

// Half-sent PUTs hold room from their header on: a PUT past it is refused at once (507);
// when they go away, their room is given back.
TEST(HorovodHttp, HalfSentBodiesHoldRoomInTheBound) {
  HorovodServing hs;
  hs.limits.max_value_bytes = 1 << 20;
  hs.limits.max_total_bytes = 4 << 20;
  hs.request_timeout = 60;
  Served sv(1, hs);
  std::vector<UniqueFd> half;
  for (int i = 0; i < 3; ++i) {
    half.push_back(connect_from(sv.server->horovod_port()));
    send_all(half.back().get(), "PUT /x/h" + std::to_string(i) + " HTTP/1.1\r\nContent-Length: 1048576\r\n\r\nabc");
  }
  EXPECT_EQ(sv.request(horovod_request("GET", "/x/h0")).status, 404);  // after their headers
  std::string full = horovod_request("PUT", "/x/v", std::string(1 << 20, 'v'));
  Reply r = sv.request(full);
  EXPECT_EQ(r.status, 507) << r.head;
  EXPECT_NE(r.body.find("being received"), std::string::npos) << r.body;
  half.clear();
  EXPECT_EQ(request_until(sv, full, 200), 200);
}

// Every byte the half-sent bodies held comes back once their connections drop (the test
// above needs only one value's room of it): the store then takes as many whole values as a
// fresh one (3 of 1 MiB in 4 MiB), and refuses the next.
TEST(HorovodHttp, DroppedHalfSentBodiesGiveAllTheirRoomBack) {
  HorovodServing hs;
  hs.limits.max_value_bytes = 1 << 20;
  hs.limits.max_total_bytes = 4 << 20;
  hs.request_timeout = 60;
  Served sv(1, hs);
  std::vector<UniqueFd> half;
  for (int i = 0; i < 3; ++i) {
    half.push_back(connect_from(sv.server->horovod_port()));
    send_all(half.back().get(), "PUT /x/h" + std::to_string(i) + " HTTP/1.1\r\nContent-Length: 1048576\r\n\r\nabc");
  }
  EXPECT_EQ(sv.request(horovod_request("GET", "/x/h0")).status, 404);  // after their headers
  half.clear();
  const std::string value(1 << 20, 'v');
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(request_until(sv, horovod_request("PUT", "/x/v" + std::to_string(i), value), 200), 200) << "value " << i;
  EXPECT_EQ(sv.request(horovod_request("PUT", "/x/v3", value)).status, 507);
}

// A value still being sent to a client that does not read stays counted after a PUT
// replaced it; once the client goes, its room is given back.
TEST(HorovodHttp, ValuesBeingSentHoldRoomInTheBound) {
  HorovodServing hs;
  size_t value = 8u << 20;  // more than loopback's socket buffers take
  hs.limits.max_value_bytes = value;
  hs.limits.max_total_bytes = value * 5 / 2;
  Served sv(1, hs);
  ASSERT_EQ(sv.request(horovod_request("PUT", "/x/k", std::string(value, '1'))).status, 200);
  std::vector<UniqueFd> readers;
  for (int i = 0; i < 3; ++i) {
    readers.push_back(connect_small_window(sv.server->horovod_port()));
    send_all(readers.back().get(), horovod_request("GET", "/x/k"));
  }
  EXPECT_EQ(sv.request(horovod_request("GET", "/nothing/here")).status, 404);  // after the GETs
  EXPECT_EQ(sv.request(horovod_request("PUT", "/x/k", std::string(value, '2'))).status, 200);
  std::string third = horovod_request("PUT", "/x/k", std::string(value, '3'));
  Reply r = sv.request(third);
  EXPECT_EQ(r.status, 507) << r.head;  // '1' (being sent) and '2' (stored) hold the room
  readers.clear();
  EXPECT_EQ(request_until(sv, third, 200), 200);
  EXPECT_EQ(sv.request(horovod_request("GET", "/x/k")).body, std::string(value, '3'));
}

// Slowloris: connections that send nothing made hvd.init() wait 20-40 s. A client's
// request is answered while they stay open (the oldest idle ones are closed).
TEST(HorovodHttp, IdleConnectionsDoNotKeepAClientWaiting) {
  HorovodServing hs;
  hs.max_connections = 16;
  hs.max_reading_per_peer = 8;
  hs.header_timeout = 60;
  hs.request_timeout = 60;
  Served sv(1, hs);
  std::vector<UniqueFd> idle;
  for (int i = 0; i < 40; ++i) {
    idle.push_back(connect_from(sv.server->horovod_port()));
    if (i % 2) send_all(idle.back().get(), "GET /glo");
  }
  Reply r = sv.request(horovod_request("GET", "/global/0"), 10);
  EXPECT_EQ(r.status, 404) << "not answered while idle connections were open";
  // The oldest were closed, without an answer.
  EXPECT_EQ(read_reply(idle.front().get(), 10).status, 0);
  pollfd p{idle.back().get(), POLLIN, 0};
  EXPECT_EQ(::poll(&p, 1, 0), 0);  // the newest is still waited for
  EXPECT_GE(sv.server->horovod_refused(), 32);
}

// Several addresses: one address's idle connections close only its own oldest.
TEST(HorovodHttp, OneAddressIdleConnectionsCloseOnlyItsOwn) {
  HorovodServing hs;
  hs.max_reading_per_peer = 4;
  hs.header_timeout = 60;
  hs.request_timeout = 60;
  hs.allowed_peers = {"127.0.0.2"};
  Served sv(1, hs);
  auto other = connect_from(sv.server->horovod_port(), "127.0.0.2");
  send_all(other.get(), "GET /glo");
  std::vector<UniqueFd> idle;
  for (int i = 0; i < 12; ++i) idle.push_back(connect_from(sv.server->horovod_port()));
  EXPECT_EQ(sv.request(horovod_request("GET", "/global/0"), 10).status, 404);
  EXPECT_EQ(read_reply(idle.front().get(), 10).status, 0);
  send_all(other.get(), "bal/0 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
  EXPECT_EQ(read_reply(other.get(), 10).status, 404);  // 127.0.0.2's connection was kept
  EXPECT_EQ(sv.server->horovod_refused(), 9);  // 13 from 127.0.0.1 (12 idle, 1 request), 4 at most reading
}

TEST(HorovodHttp, AHeaderNotSentInTimeIs408) {
  HorovodServing hs;
  hs.header_timeout = 0.5;
  hs.request_timeout = 60;
  Served sv(1, hs);
  auto fd = connect_from(sv.server->horovod_port());
  send_all(fd.get(), "GET /global/0 HTTP/1.1\r\nHost: 127");
  Reply r = read_reply(fd.get(), 10);
  EXPECT_EQ(r.status, 408) << r.head;
  EXPECT_NE(r.body.find("request header not complete within 0.5 s"), std::string::npos) << r.body;
}

TEST(HorovodHttp, ADuplicateHostHeaderIs400) {
  Served sv(1);
  Reply r = sv.request("GET /global/0 HTTP/1.1\r\nHost: 127.0.0.1\r\nHost: 10.9.9.9\r\n\r\n");
  EXPECT_EQ(r.status, 400) << r.head;
  EXPECT_NE(r.body.find("2 Host headers: expected one"), std::string::npos) << r.body;
  EXPECT_EQ(sv.server->horovod_refused(), 1);
  Reply chunked = sv.request("PUT /global/0 HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\r\n0\r\n\r\n");
  EXPECT_EQ(chunked.status, 411) << chunked.head;
}

// The store filled to its key cap by others: the job's rendezvous keys are still taken.
TEST(HorovodHttp, AFullStoreStillTakesTheJobsKeys) {
  HorovodServing hs;
  hs.limits.max_keys = 16;
  Served sv(2, hs);
  int stored = 0;
  while (sv.request(horovod_request("PUT", "/fill/k" + std::to_string(stored), "v")).status == 200) ++stored;
  EXPECT_EQ(stored, 16);
  for (const char* scope : {"global", "local_node0", "cross_0", "global_process_set_hash_5ab1"})
    for (int r = 0; r < 2; ++r) {
      EXPECT_EQ(sv.request(horovod_request("PUT", std::string("/") + scope + "/rank_" + std::to_string(r), "host")).status, 200);
      EXPECT_EQ(sv.request(horovod_request("PUT", std::string("/") + scope + "/" + std::to_string(r), std::string(136, 'a'))).status, 200);
    }
}

}  // namespace
}  // namespace hvdrun::rdv
