// What the ring tests share: ranks as threads, rings joined by socketpairs (no handshake
// needed), by shared-memory rings (real pairs: TCP handshake, then memfd rings), or by a
// mix of both (ranks on two "hosts": shared memory within each, TCP between them), and the
// checks of a collective's result on one rank.
#pragma once

#include <sys/socket.h>

#include <future>
#include <gtest/gtest.h>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "collectives/dtype.h"
#include "collectives/hierarchy.h"
#include "collectives/ring.h"
#include "common/auth.h"
#include "reference.h"
#include "transport/memory_store.h"
#include "transport/socket_util.h"

namespace hvdrun::ringtest {

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
inline std::vector<std::unique_ptr<Ring>> rings_among(const std::vector<int>& members, RingOptions o,
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

inline std::vector<std::unique_ptr<Ring>> make_pair_rings(int n, RingOptions o, const std::vector<std::string>& hosts,
                                                   size_t shm_ring_bytes = 1 << 16, size_t single_copy = 0) {
  std::vector<int> all(n);
  for (int r = 0; r < n; ++r) all[r] = r;
  return rings_among(all, o, hosts, shm_ring_bytes, single_copy);
}

// rings[r] sends to r+1 and receives from r-1. mode: "unix" (socketpairs), "shm" (one
// host), "cma" (one host, messages of 4 KiB and more by single copy), "group" (one host,
// every allreduce through the host's shared segment), "mixed" (the first half of the ranks
// on host a, the rest on host b).
inline std::vector<std::unique_ptr<Ring>> make_rings(int n, RingOptions o = {}, const std::string& mode = "unix") {
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

inline std::string check_allreduce(Ring& ring, int n, size_t count, hvd_dtype_t t, hvd_op_t op, bool in_place) {
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
inline std::pair<size_t, size_t> share_of(int r, int n, size_t rows) {
  size_t first = 0;
  for (int p = 0; p < r; ++p) first += rows / n + (static_cast<size_t>(p) < rows % n ? 1 : 0);
  return {first, rows / n + (static_cast<size_t>(r) < rows % n ? 1 : 0)};
}

// place: "out" (a buffer of its own, with guard bytes either side that must stay as they
// were), "own" (recv is this rank's share within send), "front" (recv == send).
inline std::string check_reducescatter(Ring& ring, int n, size_t rows, size_t row_elems, hvd_dtype_t t, hvd_op_t op,
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
inline void PrintTo(const RingCase& c, std::ostream* os) { *os << c.n << " ranks, " << c.mode; }

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

// Gives each of `rings` (rank r on hosts[r]) the local and cross rings of the hosts'
// layout, both collectives on the hierarchical path.
inline void attach_test_hierarchy(std::vector<std::unique_ptr<Ring>>& rings, const std::vector<std::string>& hosts,
                                  RingOptions o) {
  const int n = static_cast<int>(rings.size());
  HostLayout h = host_layout(hosts);
  ASSERT_GT(h.per_host, 0);
  const int C = h.hosts, L = h.per_host;
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
}

// Every transport and size the collectives run over (make_rings' modes).
inline auto every_ring_case() {
  return ::testing::Values(RingCase{1, "unix"}, RingCase{2, "unix"}, RingCase{3, "unix"}, RingCase{4, "unix"},
                           RingCase{7, "unix"}, RingCase{2, "shm"}, RingCase{3, "shm"}, RingCase{4, "shm"},
                           RingCase{7, "shm"}, RingCase{2, "cma"}, RingCase{3, "cma"}, RingCase{4, "cma"},
                           RingCase{3, "group"}, RingCase{4, "group"}, RingCase{3, "mixed"}, RingCase{4, "mixed"},
                           RingCase{7, "mixed"});
}
inline std::string ring_case_name(const ::testing::TestParamInfo<RingCase>& i) {
  return std::to_string(i.param.n) + "_" + i.param.mode;
}

// Every rank's set-up of the hierarchy: its address in `store`, a listener of its own.
struct HierarchyJob {
  std::vector<std::string> hosts;
  transport::MemoryStore store;
  std::vector<transport::Listener> listeners;
  std::string secret = auth::new_secret();

  explicit HierarchyJob(std::vector<std::string> h, bool registered = true) : hosts(std::move(h)) {
    for (int r = 0; r < static_cast<int>(hosts.size()); ++r) {
      auto l = transport::listen_tcp("127.0.0.1", "127.0.0.1");
      EXPECT_TRUE(l.ok());
      if (registered) store.add_peer({r, hosts[r], "127.0.0.1", l->port});
      listeners.push_back(std::move(*l));
    }
  }
  HierarchySetup setup(int r, double timeout_s = 20) {
    HierarchySetup s;
    s.store = &store;
    s.listen_fd = listeners[r].fd.get();
    s.rank = r;
    s.size = static_cast<int>(hosts.size());
    s.pairs.secret = secret;
    s.pairs.self_rank = r;
    s.pairs.self_host = hosts[r];
    s.pairs.shm_ring_bytes = 1 << 16;
    s.pairs.deadline = transport::Clock::now() + std::chrono::seconds(20);
    s.timeout_s = timeout_s;
    return s;
  }
};

}  // namespace hvdrun::ringtest
