// Ring collectives with ranks as threads, joined by socketpairs (no handshake needed), by
// shared-memory rings (real pairs: TCP handshake, then memfd rings), or by a mix of both
// (ranks on two "hosts": shared memory within each, TCP between them).
#include "collectives/ring.h"

#include <sys/eventfd.h>
#include <sys/socket.h>

#include <future>
#include <gtest/gtest.h>
#include <thread>

#include "collectives/dtype.h"
#include "collectives/hierarchy.h"
#include "common/auth.h"
#include "reference.h"
#include "transport/socket_util.h"

namespace hvdrun {
namespace {

using testref::expected_value;
using testref::input_value;
using testref::load;
using testref::store;
using testref::tolerance;

template <class Fn>
void on_all_void(int n, Fn fn) {
  std::vector<std::thread> t;
  for (int r = 0; r < n; ++r) t.emplace_back([&fn, r] { fn(r); });
  for (auto& x : t) x.join();
}

template <class Fn>
std::vector<std::string> on_all(int n, Fn fn) {
  std::vector<std::future<std::string>> f;
  for (int r = 0; r < n; ++r) f.push_back(std::async(std::launch::async, [&fn, r] { return fn(r); }));
  std::vector<std::string> out;
  for (auto& x : f) out.push_back(x.get());
  return out;
}

// A ring over real pairs on loopback among `members` (global ranks, in ring order); rank
// r's host is hosts[r] (equal hosts: shared memory). Returns one ring per member.
std::vector<std::unique_ptr<Ring>> rings_among(const std::vector<int>& members, RingOptions o,
                                               const std::vector<std::string>& hosts, size_t shm_ring_bytes = 1 << 16,
                                               size_t single_copy = 0) {
  const int n = static_cast<int>(members.size());
  std::vector<std::unique_ptr<Ring>> rings(n);
  std::string secret = auth::new_secret();
  std::vector<transport::Listener> ls(n);
  for (int i = 0; i < n; ++i) {
    auto l = transport::listen_tcp("127.0.0.1", "127.0.0.1");
    EXPECT_TRUE(l.ok());
    ls[i] = std::move(*l);
  }
  on_all_void(n, [&](int i) {
    int me = members[i], right = members[(i + 1) % n], left = members[(i + n - 1) % n];
    transport::PairOptions po;
    po.secret = secret;
    po.self_rank = me;
    po.self_host = hosts[me];
    po.shm_ring_bytes = shm_ring_bytes;  // small (64 KiB by default): the rings wrap often
    po.shm_single_copy_bytes = single_copy;
    po.deadline = transport::Clock::now() + std::chrono::seconds(20);
    Result<transport::Pair> out = Error{""};
    std::thread c([&] { out = transport::connect_pair({right, hosts[right], "127.0.0.1", ls[(i + 1) % n].port}, po); });
    auto in = transport::accept_pair(ls[i].fd.get(), {left, hosts[left], "127.0.0.1", 0}, po);
    c.join();
    EXPECT_TRUE(out.ok() && in.ok());
    if (!out.ok() || !in.ok()) return;
    EXPECT_EQ(out->is_shm(), hosts[me] == hosts[right]);
    EXPECT_EQ(in->is_shm(), hosts[me] == hosts[left]);
    rings[i] = std::make_unique<Ring>(i, n, std::move(*out), std::move(*in), o);
  });
  return rings;
}

std::vector<std::unique_ptr<Ring>> make_pair_rings(int n, RingOptions o, const std::vector<std::string>& hosts,
                                                   size_t shm_ring_bytes = 1 << 16, size_t single_copy = 0) {
  std::vector<int> all(n);
  for (int r = 0; r < n; ++r) all[r] = r;
  return rings_among(all, o, hosts, shm_ring_bytes, single_copy);
}

// rings[r] sends to r+1 and receives from r-1. mode: "unix" (socketpairs), "shm" (one
// host), "cma" (one host, messages of 4 KiB and more by single copy), "group" (one host,
// every allreduce through the host's shared segment), "mixed" (the first half of the ranks
// on host a, the rest on host b).
std::vector<std::unique_ptr<Ring>> make_rings(int n, RingOptions o = {}, const std::string& mode = "unix") {
  std::vector<std::unique_ptr<Ring>> rings(n);
  if (n > 1 && mode != "unix") {
    std::vector<std::string> hosts(n, "h");
    if (mode == "mixed")
      for (int r = 0; r < n; ++r) hosts[r] = r < (n + 1) / 2 ? "a" : "b";
    // Through the host's segment, pieces (a slot: segment_bytes, here at least 64 KiB: the
    // largest counts still take many) of more than 2 KiB take the two-barrier path, smaller
    // ones the one-barrier path: both in every test.
    if (mode == "group") {
      o.small_bytes = 2048;
      o.segment_bytes = std::max<size_t>(o.segment_bytes, 64 << 10);
    }
    auto made = make_pair_rings(n, o, hosts, 1 << 16, mode == "cma" ? 4096 : 0);
    if (mode == "group")
      on_all_void(n, [&](int r) {
        std::string why;
        auto attached = made[r]->attach_group("h", SIZE_MAX, &why);
        EXPECT_TRUE(attached.ok() && *attached) << (attached.ok() ? why : attached.error().message);
      });
    return made;
  }
  if (n == 1) {
    rings[0] = std::make_unique<Ring>(0, 1, transport::Pair{}, transport::Pair{}, o);
    return rings;
  }
  std::vector<UniqueFd> send_end(n), recv_end(n);  // link r: r -> r+1
  for (int r = 0; r < n; ++r) {
    int sv[2];
    EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    send_end[r].reset(sv[0]);
    recv_end[(r + 1) % n].reset(sv[1]);
  }
  for (int r = 0; r < n; ++r) {
    transport::Pair right(std::move(send_end[r]), {(r + 1) % n, "h"});
    transport::Pair left(std::move(recv_end[r]), {(r + n - 1) % n, "h"});
    rings[r] = std::make_unique<Ring>(r, n, std::move(right), std::move(left), o);
  }
  return rings;
}

std::string check_allreduce(Ring& ring, int n, size_t count, hvd_dtype_t t, hvd_op_t op, bool in_place) {
  size_t es = dtype_size(t);
  std::vector<char> in(count * es + 1), out(count * es + 1);
  for (size_t i = 0; i < count; ++i) store(in.data(), i, t, input_value(ring.rank(), i, n, op));
  void* dst = in_place ? in.data() : out.data();
  auto s = ring.allreduce(in.data(), dst, count, t, op);
  if (!s) return s.error().message;
  for (size_t i = 0; i < count; ++i) {
    double e = expected_value(i, n, op), g = load(dst, i, t);
    if (std::fabs(g - e) > tolerance(t, e))
      return "element " + std::to_string(i) + ": got " + std::to_string(g) + ", expected " + std::to_string(e);
  }
  return "";
}

// Rank r's share of a reducescatter of `rows` rows: where it starts and how many rows.
std::pair<size_t, size_t> share_of(int r, int n, size_t rows) {
  size_t first = 0;
  for (int p = 0; p < r; ++p) first += rows / n + (static_cast<size_t>(p) < rows % n ? 1 : 0);
  return {first, rows / n + (static_cast<size_t>(r) < rows % n ? 1 : 0)};
}

// place: "out" (a buffer of its own, with guard bytes either side that must stay as they
// were), "own" (recv is this rank's share within send), "front" (recv == send).
std::string check_reducescatter(Ring& ring, int n, size_t rows, size_t row_elems, hvd_dtype_t t, hvd_op_t op,
                                const std::string& place) {
  const size_t es = dtype_size(t), count = rows * row_elems, guard = 64;
  const auto [first, mine] = share_of(ring.rank(), n, rows);
  std::vector<char> in(count * es + 1), out(mine * row_elems * es + 2 * guard, '\x5a');
  for (size_t i = 0; i < count; ++i) store(in.data(), i, t, input_value(ring.rank(), i, n, op));
  char* dst = place == "own" ? in.data() + first * row_elems * es : place == "front" ? in.data() : out.data() + guard;
  auto s = ring.reducescatter(in.data(), dst, rows, row_elems, t, op);
  if (!s) return s.error().message;
  for (size_t i = 0; i < mine * row_elems; ++i) {
    double e = expected_value(first * row_elems + i, n, op), g = load(dst, i, t);
    if (std::fabs(g - e) > tolerance(t, e))
      return "element " + std::to_string(i) + " of the share: got " + std::to_string(g) + ", expected " +
             std::to_string(e);
  }
  if (place == "out")
    for (size_t i : {size_t{0}, guard - 1, guard + mine * row_elems * es, out.size() - 1})
      if (out[i] != '\x5a') return "wrote outside the share, at byte " + std::to_string(i) + " of the output";
  return "";
}

struct RingCase {
  int n;
  const char* mode;
};
void PrintTo(const RingCase& c, std::ostream* os) { *os << c.n << " ranks, " << c.mode; }

class RingAllreduce : public ::testing::TestWithParam<RingCase> {};

TEST_P(RingAllreduce, EveryDtypeOpCountAndPlacement) {
  const int n = GetParam().n;
  RingOptions o;
  o.segment_bytes = 4096;  // many segments even for modest counts
  auto rings = make_rings(n, o, GetParam().mode);
  std::vector<size_t> counts = {0, 1, static_cast<size_t>(std::max(n - 1, 0)), static_cast<size_t>(n + 1), 1003,
                                (1 << 20) + 3};
  auto results = on_all(n, [&](int r) -> std::string {
    for (int t = HVD_INT8; t <= HVD_FLOAT64; ++t)
      for (int op = HVD_OP_SUM; op <= HVD_OP_PRODUCT; ++op) {
        if (op == HVD_OP_AVERAGE && !dtype_is_float(static_cast<hvd_dtype_t>(t))) continue;
        for (size_t c : counts)
          for (bool ip : {false, true}) {
            std::string e = check_allreduce(*rings[r], n, c, static_cast<hvd_dtype_t>(t), static_cast<hvd_op_t>(op), ip);
            if (!e.empty())
              return std::string(dtype_name(static_cast<hvd_dtype_t>(t))) + " " + op_name(static_cast<hvd_op_t>(op)) +
                     " count " + std::to_string(c) + (ip ? " in place: " : ": ") + e;
          }
      }
    return "";
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(results[r], "") << "rank " << r;
}

// Shares of every size (zero rows on some ranks when rows < n, uneven when rows % n != 0),
// rows of one and of several elements, every op, in and out of place.
TEST_P(RingAllreduce, ReducescatterEveryShareOpAndPlacement) {
  const int n = GetParam().n;
  RingOptions o;
  o.segment_bytes = 4096;
  auto rings = make_rings(n, o, GetParam().mode);
  const std::vector<size_t> rows = {0, 1, static_cast<size_t>(std::max(n - 1, 1)), static_cast<size_t>(n + 1), 1003,
                                    (1 << 17) + 3};
  auto results = on_all(n, [&](int r) -> std::string {
    for (hvd_dtype_t t : {HVD_INT8, HVD_INT32, HVD_BFLOAT16, HVD_FLOAT32, HVD_FLOAT64})
      for (int op = HVD_OP_SUM; op <= HVD_OP_PRODUCT; ++op) {
        if (op == HVD_OP_AVERAGE && !dtype_is_float(t)) continue;
        for (size_t rw : rows)
          for (size_t row_elems : {size_t{1}, size_t{3}})
            for (const char* place : {"out", "own", "front"}) {
              if (rw > 1003 && (row_elems > 1 || std::string(place) != "out")) continue;
              std::string e = check_reducescatter(*rings[r], n, rw, row_elems, t, static_cast<hvd_op_t>(op), place);
              if (!e.empty())
                return std::string(dtype_name(t)) + " " + op_name(static_cast<hvd_op_t>(op)) + " rows " +
                       std::to_string(rw) + " x " + std::to_string(row_elems) + " (" + place + "): " + e;
            }
      }
    return "";
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(results[r], "") << "rank " << r;
}

TEST_P(RingAllreduce, LargeCountIsBitwiseIdenticalOnEveryRank) {
  const int n = GetParam().n;
  auto rings = make_rings(n, {}, GetParam().mode);
  const size_t count = (1 << 20) + 3;
  std::vector<std::vector<float>> out(n);
  auto results = on_all(n, [&](int r) -> std::string {
    std::vector<float> in(count);
    for (size_t i = 0; i < count; ++i) in[i] = 0.1f * static_cast<float>((r * 7 + i) % 13);  // inexact sums
    out[r].resize(count);
    auto s = rings[r]->allreduce(in.data(), out[r].data(), count, HVD_FLOAT32, HVD_OP_AVERAGE);
    return s ? "" : s.error().message;
  });
  for (int r = 0; r < n; ++r) ASSERT_EQ(results[r], "");
  for (int r = 1; r < n; ++r) EXPECT_EQ(std::memcmp(out[r].data(), out[0].data(), count * 4), 0) << "rank " << r;
}

TEST_P(RingAllreduce, BroadcastFromEveryRootAndAllgather) {
  const int n = GetParam().n;
  RingOptions o;
  o.segment_bytes = 4096;
  auto rings = make_rings(n, o, GetParam().mode);
  const size_t count = 5000;
  auto results = on_all(n, [&](int r) -> std::string {
    for (int root = 0; root < n; ++root) {
      std::vector<int32_t> buf(count, -1);
      if (r == root)
        for (size_t i = 0; i < count; ++i) buf[i] = static_cast<int32_t>(root * 100000 + i);
      auto s = rings[r]->broadcast(buf.data(), count, HVD_INT32, root);
      if (!s) return s.error().message;
      for (size_t i = 0; i < count; ++i)
        if (buf[i] != static_cast<int32_t>(root * 100000 + i)) return "broadcast from " + std::to_string(root);
    }
    for (size_t c : {size_t{0}, size_t{1}, count}) {
      std::vector<int64_t> in(c), out(c * n, -1);
      for (size_t i = 0; i < c; ++i) in[i] = r * 1000000 + static_cast<int64_t>(i);
      auto s = rings[r]->allgather(in.data(), out.data(), c, HVD_INT64);
      if (!s) return s.error().message;
      for (int p = 0; p < n; ++p)
        for (size_t i = 0; i < c; ++i)
          if (out[p * c + i] != p * 1000000 + static_cast<int64_t>(i)) return "allgather block " + std::to_string(p);
    }
    for (int b = 0; b < 3; ++b)
      if (auto s = rings[r]->barrier(); !s) return s.error().message;
    return "";
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(results[r], "") << "rank " << r;
}

INSTANTIATE_TEST_SUITE_P(Sizes, RingAllreduce,
                         ::testing::Values(RingCase{1, "unix"}, RingCase{2, "unix"}, RingCase{3, "unix"},
                                           RingCase{4, "unix"}, RingCase{7, "unix"}, RingCase{2, "shm"},
                                           RingCase{3, "shm"}, RingCase{4, "shm"}, RingCase{7, "shm"},
                                           RingCase{2, "cma"}, RingCase{3, "cma"}, RingCase{4, "cma"},
                                           RingCase{3, "group"}, RingCase{4, "group"},
                                           RingCase{3, "mixed"}, RingCase{4, "mixed"}, RingCase{7, "mixed"}),
                         [](const ::testing::TestParamInfo<RingCase>& i) {
                           return std::to_string(i.param.n) + "_" + i.param.mode;
                         });

TEST(Ring, MismatchedCountsFailEverywhereWithoutHanging) {
  const int n = 3;
  RingOptions o;
  o.timeout_s = 20;
  auto rings = make_rings(n, o);
  auto results = on_all(n, [&](int r) -> std::string {
    std::vector<float> buf(100, 1.f);
    auto s = rings[r]->allreduce(buf.data(), buf.data(), r == 1 ? 99 : 100, HVD_FLOAT32, HVD_OP_SUM);
    return s ? "ok" : s.error().message;
  });
  // Rank 1 and its right neighbour see the disagreement; the third learns its ring broke.
  EXPECT_NE(results[1].find("rank 1 called allreduce(count=99, float32, sum) #0 but its left neighbour rank 0 (host h) "
                            "called allreduce(count=100, float32, sum) #0"),
            std::string::npos)
      << results[1];
  // Rank 2 sees either the disagreement or rank 1 closing the ring after seeing it.
  EXPECT_TRUE(results[2].find("called allreduce(count=99") != std::string::npos ||
              results[2].find("rank 1 (host h) closed") != std::string::npos)
      << results[2];
  EXPECT_NE(results[0], "ok");
}

TEST(Ring, TheHostSegmentsSlotIsASegmentWithinBounds) {
  EXPECT_EQ(group_slot_bytes(256 << 10, 4), size_t{256} << 10);  // the default: a segment
  EXPECT_EQ(group_slot_bytes(size_t{1} << 30, 4), size_t{1} << 20);  // at most 1 MiB
  EXPECT_EQ(group_slot_bytes(256 << 10, 256), size_t{128} << 10);  // at most 32 MiB in all
  EXPECT_EQ(group_slot_bytes(256 << 10, 1 << 20), size_t{4096});  // at least a page
}

// Through the host's shared segment every rank compares every rank's call: all of them
// name the one that differs.
TEST(Ring, MismatchedCountsInTheHostSegmentFailOnEveryRank) {
  const int n = 3;
  RingOptions o;
  o.timeout_s = 20;
  auto rings = make_rings(n, o, "group");
  auto results = on_all(n, [&](int r) -> std::string {
    std::vector<float> buf(100, 1.f);
    auto s = rings[r]->allreduce(buf.data(), buf.data(), r == 1 ? 99 : 100, HVD_FLOAT32, HVD_OP_SUM);
    return s ? "ok" : s.error().message;
  });
  EXPECT_NE(results[0].find("rank 0 called allreduce(count=100, float32, sum) #3 but rank 1 called "
                            "allreduce(count=99, float32, sum) #3"),
            std::string::npos)
      << results[0];
  EXPECT_NE(results[1].find("rank 1 called allreduce(count=99, float32, sum) #3 but rank 0 called"), std::string::npos)
      << results[1];
  EXPECT_NE(results[2].find("but rank 1 called allreduce(count=99"), std::string::npos) << results[2];
}

// A reducescatter whose rows differ fails like an allreduce, naming both calls: over the
// ring the right neighbour of the odd one out, through the host's segment every rank.
TEST(Ring, MismatchedReducescatterRowsFailNamingBothCalls) {
  for (const char* mode : {"unix", "group"}) {
    SCOPED_TRACE(mode);
    const int n = 3;
    RingOptions o;
    o.timeout_s = 20;
    auto rings = make_rings(n, o, mode);
    auto results = on_all(n, [&](int r) -> std::string {
      std::vector<float> in(100 * 2, 1.f), out(34 * 2);
      auto s = rings[r]->reducescatter(in.data(), out.data(), r == 1 ? 99 : 100, 2, HVD_FLOAT32, HVD_OP_SUM);
      return s ? "ok" : s.error().message;
    });
    EXPECT_NE(results[1].find("rank 1 called reducescatter(rows=99, row_elems=2, float32, sum) #"), std::string::npos)
        << results[1];
    EXPECT_TRUE(results[2].find("called reducescatter(rows=99") != std::string::npos ||
                results[2].find("rank 1 (host h) closed") != std::string::npos)
        << results[2];
    EXPECT_NE(results[0], "ok");
  }
}

class RingDeadPeer : public ::testing::TestWithParam<const char*> {};

// Rank 2 of 3 dies while the others run `call` (a large collective): both fail at once
// naming the peer they lost, and every later call fails too.
template <class Call>
void expect_dead_peer_named(const char* mode, Call call) {
  const int n = 3;
  auto rings = make_rings(n, {}, mode);
  const size_t count = 8 << 20;
  auto results = on_all(n, [&](int r) -> std::string {
    if (r == 2) {
      rings[2].reset();  // rank 2 dies: its sockets close
      return "dead";
    }
    std::vector<float> buf(count, 1.f);
    auto s = call(*rings[r], buf.data(), count);
    if (s) return "ok";
    auto again = rings[r]->allreduce(buf.data(), buf.data(), 1, HVD_FLOAT32, HVD_OP_SUM);  // later calls fail too
    return s.error().message + (again ? " | later call succeeded" : "");
  });
  EXPECT_NE(results[0].find("rank 2 (host "), std::string::npos) << results[0];  // 0 receives from 2
  // Rank 1 sends to 2; it may instead first see rank 0 close its ring after 0's failure:
  // either way it fails at once and names the peer it lost.
  EXPECT_TRUE(results[1].find("rank 2 (host ") != std::string::npos ||
              results[1].find("connection to rank 0 (host ") != std::string::npos)
      << results[1];
  EXPECT_EQ(results[1].find("later call succeeded"), std::string::npos);
  EXPECT_EQ(results[0].find("later call succeeded"), std::string::npos);
}

TEST_P(RingDeadPeer, FailsFastNamingIt) {
  expect_dead_peer_named(GetParam(), [](Ring& ring, float* buf, size_t count) {
    return ring.allreduce(buf, buf, count, HVD_FLOAT32, HVD_OP_SUM);
  });
}

TEST_P(RingDeadPeer, ReducescatterFailsFastNamingIt) {
  expect_dead_peer_named(GetParam(), [](Ring& ring, float* buf, size_t count) {
    return ring.reducescatter(buf, buf + count / 2, count, 1, HVD_FLOAT32, HVD_OP_SUM);
  });
}

INSTANTIATE_TEST_SUITE_P(Transports, RingDeadPeer, ::testing::Values("unix", "shm", "cma", "group", "mixed"));

// The engine's background thread waits in watch_left() while another thread may close the
// ring (a failed collective): close() wakes it and waits for it, over TCP (a poll() with
// no time limit) and over shared memory; then watch_left() returns at once.
TEST(Ring, CloseWakesAWatcherAndWaitsForIt) {
  for (const char* mode : {"unix", "shm"}) {
    SCOPED_TRACE(mode);
    auto rings = make_rings(2, {}, mode);
    ASSERT_TRUE(rings[0] && rings[1]);
    UniqueFd wake_fd(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
    std::atomic<uint32_t> word{0};
    auto watcher = std::async(std::launch::async, [&] { rings[0]->watch_left(wake_fd.get(), &word, 0, -1); });
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    auto closer = std::async(std::launch::async, [&] { rings[0]->close("test"); });
    ASSERT_EQ(closer.wait_for(std::chrono::seconds(10)), std::future_status::ready) << "close() hung on the watcher";
    auto t0 = std::chrono::steady_clock::now();
    ASSERT_EQ(watcher.wait_for(std::chrono::seconds(10)), std::future_status::ready);
    rings[0]->watch_left(wake_fd.get(), &word, 0, -1);  // closed: returns at once
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  }
}

// The engine's negotiation (allgather_bytes) sends each message whole while it receives the
// peer's length: a message larger than the ring (or the socket buffers) must not leave both
// neighbours waiting for room that only the other's next step frees. Rings of 4 KiB, 3 and
// 2 ranks, messages from empty to past the ring, the socket buffers and the old 32 KiB
// eager bound.
TEST(Ring, AllgatherBytesOfMessagesLargerThanTheChannelDoNotDeadlock) {
  RingOptions o;
  o.timeout_s = 5;  // a deadlock ends as a time-out, not a hang
  for (int n : {2, 3}) {
    for (const char* mode : {"unix", "shm", "mixed"}) {
      SCOPED_TRACE(std::to_string(n) + " ranks, " + mode);
      std::vector<std::string> hosts(n, "h");  // mixed: the last rank on a host of its own (TCP to it)
      if (std::string(mode) == "mixed") hosts[n - 1] = "other";
      auto rings = std::string(mode) == "unix" ? make_rings(n, o, mode) : make_pair_rings(n, o, hosts, 4096);
      for (auto& r : rings) ASSERT_TRUE(r);
      auto errors = on_all(n, [&](int r) -> std::string {
        for (size_t len : {size_t{0}, size_t{100}, size_t{4000}, size_t{5000}, size_t{20000}, size_t{32768},
                           size_t{300000}, size_t{1500000}}) {
          std::vector<std::string> all(n);
          all[r].assign(Ring::kFrameBytes, '\0');
          for (size_t i = 0; i < len + r; ++i) all[r].push_back(static_cast<char>('a' + (i * 7 + r) % 26));
          if (auto s = rings[r]->allgather_bytes(&all); !s) return std::to_string(len) + " bytes: " + s.error().message;
          for (int p = 0; p < n; ++p) {
            if (all[p].size() != Ring::kFrameBytes + len + p) return "wrong length from rank " + std::to_string(p);
            for (size_t i = 0; i < len + p; ++i)
              if (all[p][Ring::kFrameBytes + i] != static_cast<char>('a' + (i * 7 + p) % 26))
                return "wrong byte " + std::to_string(i) + " from rank " + std::to_string(p);
          }
        }
        return "";
      });
      for (int r = 0; r < n; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
    }
  }
}

TEST(Ring, SilentPeerTimesOut) {
  RingOptions o;
  o.timeout_s = 0.5;
  auto rings = make_rings(2, o);
  std::vector<float> buf(10, 1.f);
  auto s = rings[0]->allreduce(buf.data(), buf.data(), 10, HVD_FLOAT32, HVD_OP_SUM);  // rank 1 never calls
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().kind, ErrorKind::kTimeout);
  EXPECT_NE(s.error().message.find("no progress with rank 1 (host h)"), std::string::npos) << s.error().message;
}

// Hierarchical collectives with ranks as threads: hosts x per_host ranks, local rings over
// shared memory, cross rings over TCP, the global ring mixed (the flat fallback).
struct HierCase {
  int hosts, per_host;
  bool interleaved;  // ranks dealt round-robin to the hosts instead of in blocks
};
void PrintTo(const HierCase& c, std::ostream* os) {
  *os << c.hosts << " hosts x " << c.per_host << (c.interleaved ? " interleaved" : "");
}
class RingHierarchy : public ::testing::TestWithParam<HierCase> {};

TEST_P(RingHierarchy, AllreduceAndAllgatherAreRightAndIdenticalEverywhere) {
  const auto [C, L, interleaved] = GetParam();
  const int n = C * L;
  std::vector<std::string> hosts(n);
  for (int r = 0; r < n; ++r) hosts[r] = "host" + std::to_string(interleaved ? r % C : r / L);
  RingOptions o;
  o.segment_bytes = 4096;
  auto rings = make_pair_rings(n, o, hosts);
  HostLayout h = host_layout(hosts);
  ASSERT_EQ(h.per_host, L);
  std::vector<std::unique_ptr<Ring>> local(n), cross(n);
  for (int c = 0; c < C; ++c) {
    std::vector<int> m(h.rank_of.begin() + c * L, h.rank_of.begin() + (c + 1) * L);
    auto rs = rings_among(m, o, hosts);
    for (int l = 0; l < L; ++l) local[m[l]] = std::move(rs[l]);
  }
  for (int l = 0; l < L; ++l) {
    std::vector<int> m;
    for (int c = 0; c < C; ++c) m.push_back(h.rank_of[c * L + l]);
    auto rs = rings_among(m, o, hosts);
    for (int c = 0; c < C; ++c) cross[m[c]] = std::move(rs[c]);
  }
  for (int r = 0; r < n; ++r) rings[r]->set_hierarchy(std::move(local[r]), std::move(cross[r]), h.rank_of, {true, true});
  const size_t big = (1 << 18) + 5;
  std::vector<std::vector<float>> avg(n);
  auto results = on_all(n, [&](int r) -> std::string {
    for (int t = HVD_INT8; t <= HVD_FLOAT64; ++t)
      for (int op = HVD_OP_SUM; op <= HVD_OP_PRODUCT; ++op) {
        if (op == HVD_OP_AVERAGE && !dtype_is_float(static_cast<hvd_dtype_t>(t))) continue;
        for (size_t c : {size_t{0}, size_t{1}, static_cast<size_t>(L - 1), static_cast<size_t>(n + 1), size_t{1003}, big})
          for (bool ip : {false, true}) {
            std::string e = check_allreduce(*rings[r], n, c, static_cast<hvd_dtype_t>(t), static_cast<hvd_op_t>(op), ip);
            if (!e.empty())
              return std::string(dtype_name(static_cast<hvd_dtype_t>(t))) + " " + op_name(static_cast<hvd_op_t>(op)) +
                     " count " + std::to_string(c) + (ip ? " in place: " : ": ") + e;
          }
      }
    std::vector<float> in(big);
    for (size_t i = 0; i < big; ++i) in[i] = 0.1f * static_cast<float>((r * 7 + i) % 13);  // inexact sums
    avg[r].resize(big);
    if (auto s = rings[r]->allreduce(in.data(), avg[r].data(), big, HVD_FLOAT32, HVD_OP_AVERAGE); !s)
      return s.error().message;
    for (size_t c : {size_t{0}, size_t{1}, size_t{5000}}) {
      std::vector<int64_t> gin(c), gout(c * n, -1);
      for (size_t i = 0; i < c; ++i) gin[i] = r * 1000000 + static_cast<int64_t>(i);
      if (auto s = rings[r]->allgather(gin.data(), gout.data(), c, HVD_INT64); !s) return s.error().message;
      for (int p = 0; p < n; ++p)
        for (size_t i = 0; i < c; ++i)
          if (gout[p * c + i] != p * 1000000 + static_cast<int64_t>(i)) return "allgather block " + std::to_string(p);
    }
    // A reducescatter takes the flat ring beside the hierarchy.
    for (size_t rw : {static_cast<size_t>(n + 1), size_t{5003}})
      if (std::string e = check_reducescatter(*rings[r], n, rw, 3, HVD_FLOAT32, HVD_OP_AVERAGE, "out"); !e.empty())
        return "reducescatter of " + std::to_string(rw) + " rows: " + e;
    if (auto s = rings[r]->barrier(); !s) return s.error().message;  // the flat ring still works beside
    return "";
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(results[r], "") << "rank " << r;
  for (int r = 1; r < n; ++r) EXPECT_EQ(std::memcmp(avg[r].data(), avg[0].data(), big * 4), 0) << "rank " << r;
}

INSTANTIATE_TEST_SUITE_P(Layouts, RingHierarchy,
                         ::testing::Values(HierCase{2, 2, false}, HierCase{2, 3, false}, HierCase{3, 2, false},
                                           HierCase{2, 2, true}),
                         [](const ::testing::TestParamInfo<HierCase>& i) {
                           return std::to_string(i.param.hosts) + "x" + std::to_string(i.param.per_host) +
                                  (i.param.interleaved ? "_interleaved" : "");
                         });

TEST(Dtype, HalfAndBfloat16RoundTripAndRoundToNearestEven) {
  for (uint32_t h = 0; h < 65536; ++h) {
    uint16_t x = static_cast<uint16_t>(h);
    bool nan = (x & 0x7c00) == 0x7c00 && (x & 0x3ff);
    if (!nan) {
      ASSERT_EQ(float_to_half(half_to_float(x)), x) << h;
    }
    bool bnan = (x & 0x7f80) == 0x7f80 && (x & 0x7f);
    if (!bnan) {
      ASSERT_EQ(float_to_bf16(bf16_to_float(x)), x) << h;
    }
  }
  EXPECT_EQ(float_to_half(1.0f + 1.0f / 2048), 0x3c00);      // tie -> even (down)
  EXPECT_EQ(float_to_half(1.0f + 3.0f / 2048), 0x3c02);      // tie -> even (up)
  EXPECT_EQ(float_to_half(65520.0f), 0x7c00);                // overflows to inf
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -24)), 0x0001);   // smallest subnormal
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -25)), 0x0000);   // tie -> even (zero)
  EXPECT_EQ(float_to_bf16(1.0f + 1.0f / 256), 0x3f80);       // tie -> even
  EXPECT_EQ(float_to_bf16(1.0f + 3.0f / 256), 0x3f82);
}

}  // namespace
}  // namespace hvdrun
