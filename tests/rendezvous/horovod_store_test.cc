// hvdrun --horovod: Horovod's Gloo rendezvous store (rendezvous/horovod_store): the pure
// store, its bounds and the allow-list. Served over HTTP: horovod_http_test.cc.
#include "rendezvous/horovod_store.h"

#include <gtest/gtest.h>

#include "rendezvous/auth.h"

namespace hvdrun::rdv {
namespace {

// ---- The pure store -------------------------------------------------------------------

TEST(HorovodStoreTarget, SplitsExactlyScopeAndKey) {
  auto a = split_store_target("/global/0");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->first, "global");
  EXPECT_EQ(a->second, "0");
  auto e = split_store_target("/local_node1/");  // Horovod: an empty key is a key
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->first, "local_node1");
  EXPECT_EQ(e->second, "");
  for (const char* bad : {"", "/", "/global", "global/0", "/a/b/c", "//a/b"}) {
    auto r = split_store_target(bad);
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_NE(r.error().message.find("expected /SCOPE/KEY"), std::string::npos) << r.error().message;
    }
  }
}

TEST(HorovodStore, PutGetAndMissingKey) {
  HorovodStore s({{"global", 2}});
  auto is = [](const HttpAnswer& a, int status, std::string_view body) {
    return a.status == status && a.body() == body;
  };
  EXPECT_TRUE(is(s.handle("GET", "/global/0", ""), 404, ""));
  EXPECT_TRUE(is(s.handle("PUT", "/global/0", std::string("a\0b", 3)), 200, ""));
  EXPECT_TRUE(is(s.handle("GET", "/global/0", ""), 200, std::string("a\0b", 3)));
  EXPECT_TRUE(is(s.handle("GET", "/other/0", ""), 404, ""));  // scopes are apart
  EXPECT_TRUE(is(s.handle("PUT", "/global/0", "new"), 200, ""));
  EXPECT_EQ(s.handle("GET", "/global/0", "").body(), "new");
  EXPECT_EQ(s.keys(), 1u);
}

TEST(HorovodStore, JobScopeIsDroppedWhenEveryRankFinishedIt) {
  HorovodStore s({{"global", 2}, {"local_a", 2}});
  for (const char* t : {"/global/0", "/global/1", "/global/rank_0", "/local_a/0"})
    ASSERT_EQ(s.handle("PUT", t, "v").status, 200);
  EXPECT_EQ(s.handle("DELETE", "/global/0", "").status, 200);
  EXPECT_EQ(s.handle("DELETE", "/global/0", "").status, 200);  // a retried DELETE counts once
  EXPECT_EQ(s.handle("GET", "/global/1", "").status, 200);
  EXPECT_EQ(s.handle("DELETE", "/global/1", "").status, 200);
  EXPECT_EQ(s.handle("GET", "/global/0", "").status, 404);
  EXPECT_EQ(s.handle("GET", "/global/rank_0", "").status, 404);
  EXPECT_EQ(s.handle("GET", "/local_a/0", "").status, 200);  // other scopes stay
  EXPECT_EQ(s.keys(), 1u);
  // The next round (hvd.shutdown(); hvd.init()) starts from an empty scope and a new count.
  ASSERT_EQ(s.handle("PUT", "/global/0", "w").status, 200);
  EXPECT_EQ(s.handle("DELETE", "/global/0", "").status, 200);
  EXPECT_EQ(s.handle("GET", "/global/0", "").body(), "w");
  EXPECT_EQ(s.handle("DELETE", "/global/1", "").status, 200);
  EXPECT_EQ(s.handle("GET", "/global/0", "").status, 404);
}

TEST(HorovodStore, AdHocScopeDeletesTheKeyThenTheScope) {
  HorovodStore s({{"global", 2}});
  ASSERT_EQ(s.handle("PUT", "/global_process_set_hash_1f/0", "x").status, 200);
  ASSERT_EQ(s.handle("PUT", "/global_process_set_hash_1f/1", "y").status, 200);
  EXPECT_EQ(s.handle("DELETE", "/global_process_set_hash_1f/0", "").status, 200);
  EXPECT_EQ(s.handle("GET", "/global_process_set_hash_1f/0", "").status, 404);
  EXPECT_EQ(s.handle("GET", "/global_process_set_hash_1f/1", "").body(), "y");
  EXPECT_EQ(s.handle("DELETE", "/global_process_set_hash_1f/1", "").status, 200);
  EXPECT_EQ(s.handle("DELETE", "/nothing/here", "").status, 200);  // as Horovod: nothing to do
  EXPECT_EQ(s.keys(), 0u);
  EXPECT_EQ(s.bytes(), 0u);
}

TEST(HorovodStore, BoundsAreErrorsAndTheStoreGoesOn) {
  HorovodStoreLimits lim;
  lim.max_value_bytes = 100;
  lim.max_keys = 3;
  lim.max_total_bytes = 3 * (HorovodStore::kEntryOverhead + 20 + 50);
  HorovodStore s({}, lim);
  auto big = s.handle("PUT", "/s/k", std::string(101, 'x'));
  EXPECT_EQ(big.status, 413);
  EXPECT_NE(big.text.find("101 bytes exceeds the limit of 100 bytes"), std::string::npos) << big.text;
  ASSERT_EQ(s.handle("PUT", "/s/k1", std::string(50, 'x')).status, 200);
  ASSERT_EQ(s.handle("PUT", "/s/k2", std::string(50, 'x')).status, 200);
  ASSERT_EQ(s.handle("PUT", "/s/k2", std::string(60, 'x')).status, 200);  // overwrite: one key still
  EXPECT_EQ(s.keys(), 2u);
  auto full = s.handle("PUT", "/s/k3", std::string(100, 'x'));
  EXPECT_EQ(full.status, 507);
  EXPECT_NE(full.text.find("the store's limit of"), std::string::npos) << full.text;
  ASSERT_EQ(s.handle("PUT", "/s/k3", "small").status, 200);
  auto many = s.handle("PUT", "/s/k4", "x");
  EXPECT_EQ(many.status, 507);
  EXPECT_NE(many.text.find("more than 3 keys"), std::string::npos) << many.text;
  EXPECT_EQ(s.handle("GET", "/s/k1", "").status, 200);
  EXPECT_EQ(s.handle("DELETE", "/s/k1", "").status, 200);
  EXPECT_EQ(s.handle("DELETE", "/s/k2", "").status, 200);
  EXPECT_EQ(s.handle("DELETE", "/s/k3", "").status, 200);
  EXPECT_EQ(s.bytes(), 0u);
  auto longpath = s.handle("GET", "/s/" + std::string(3000, 'k'), "");
  EXPECT_EQ(longpath.status, 414);
}

TEST(HorovodStore, OnlyGetPutDelete) {
  HorovodStore s({});
  for (const char* m : {"POST", "HEAD", "OPTIONS", "get", ""}) {
    auto a = s.handle(m, "/s/k", "");
    EXPECT_EQ(a.status, 405) << m;
    EXPECT_NE(a.text.find("GET, PUT and DELETE"), std::string::npos);
  }
  EXPECT_EQ(s.handle("GET", "/a/b/c", "").status, 400);
  EXPECT_EQ(s.handle("PUT", "/nokey", "v").status, 400);
  EXPECT_EQ(s.handle("DELETE", "/", "").status, 400);
}

// 300 GETs of an 8 MiB value that never read their answer grew hvdrun by 2.5 GB: each
// answer was a copy, outside the bound. An answer now shares the stored value, and a value
// an answer still holds stays counted after the store replaced it.
TEST(HorovodStore, AnswersShareTheValueAndItsBytesStayCountedUntilSent) {
  HorovodStoreLimits lim;
  lim.max_value_bytes = 1000;
  size_t entry = 1 + 1 + HorovodStore::kEntryOverhead + 1000;  // "s", "k"
  lim.max_total_bytes = 3 * entry + 10;
  HorovodStore s({}, lim);
  ASSERT_EQ(s.handle("PUT", "/s/k", std::string(1000, '1')).status, 200);
  EXPECT_EQ(s.bytes(), entry);
  std::vector<HttpAnswer> sending;
  for (int i = 0; i < 100; ++i) sending.push_back(s.handle("GET", "/s/k", ""));
  EXPECT_EQ(sending[0].value.get(), sending[99].value.get());  // one value, no copies
  EXPECT_EQ(s.bytes(), entry);
  ASSERT_EQ(s.handle("PUT", "/s/k", std::string(1000, '2')).status, 200);  // '1' still being sent
  EXPECT_EQ(s.bytes(), 2 * entry);
  sending.push_back(s.handle("GET", "/s/k", ""));
  ASSERT_EQ(s.handle("PUT", "/s/k", std::string(1000, '3')).status, 200);
  EXPECT_EQ(s.bytes(), 3 * entry);
  auto full = s.handle("PUT", "/s/k", std::string(1000, '4'));
  EXPECT_EQ(full.status, 507);
  EXPECT_NE(full.text.find("values stored, being received and being sent"), std::string::npos) << full.text;
  EXPECT_EQ(sending[0].body(), std::string(1000, '1'));
  EXPECT_EQ(sending[100].body(), std::string(1000, '2'));
  sending.clear();  // all sent
  EXPECT_EQ(s.bytes(), entry);
  EXPECT_EQ(s.handle("PUT", "/s/k", std::string(1000, '4')).status, 200);
  EXPECT_EQ(s.handle("DELETE", "/s/k", "").status, 200);
  EXPECT_EQ(s.bytes(), 0u);
}

// 100 half-sent 8 MiB PUTs grew hvdrun by 830 MB: a body being received was not counted.
// Its room is now taken when the header announces it, before it is read.
TEST(HorovodStore, BodiesBeingReceivedAreCountedFromTheirHeader) {
  HorovodStoreLimits lim;
  lim.max_value_bytes = 1000;
  size_t entry = 1 + 2 + HorovodStore::kEntryOverhead + 1000;  // "s", "kN"
  lim.max_total_bytes = 3 * entry;
  HorovodStore s({}, lim);
  std::vector<Admission> receiving;
  for (int i = 0; i < 3; ++i) {
    receiving.push_back(s.admit("PUT", "/s/k" + std::to_string(i), 1000));
    ASSERT_TRUE(receiving.back().ok()) << receiving.back().refusal.text;
  }
  EXPECT_EQ(s.bytes(), 3 * entry);
  Admission more = s.admit("PUT", "/s/k3", 1000);
  EXPECT_EQ(more.refusal.status, 507);
  EXPECT_EQ(s.admit("PUT", "/s/k3", 2000).refusal.status, 413);
  EXPECT_EQ(s.admit("POST", "/s/k3", 0).refusal.status, 405);
  EXPECT_TRUE(s.admit("GET", "/s/k0", 0).ok());  // a GET holds nothing
  // One completes: its room becomes the stored value's. One is abandoned: its room is given back.
  EXPECT_EQ(s.handle("PUT", "/s/k0", std::string(1000, 'v'), std::move(receiving[0].charge)).status, 200);
  receiving.pop_back();
  EXPECT_EQ(s.bytes(), 2 * entry);
  EXPECT_TRUE(s.admit("PUT", "/s/k3", 1000).ok());
  receiving.clear();
  EXPECT_EQ(s.bytes(), entry);
}

// Gloo's rendezvous in a scope of `size` ranks (third_party/gloo at Horovod 0.28.1,
// rendezvous/context.cc, through Horovod's HTTPStore): each rank PUTs "rank_R" (its host
// name), then "R" (one 136-byte address per other rank). The statuses of the PUTs.
std::vector<int> gloo_puts(HorovodStore& s, const std::string& scope, int size) {
  std::vector<int> out;
  for (int r = 0; r < size; ++r) {
    out.push_back(s.handle("PUT", "/" + scope + "/rank_" + std::to_string(r), std::string(64, 'h')).status);
    out.push_back(s.handle("PUT", "/" + scope + "/" + std::to_string(r), std::string(136 * (size - 1), 'a')).status);
  }
  return out;
}

// Filling the store to its key cap made the job's next hvd.init() abort (SIGABRT: Horovod's
// HTTPStore throws after three refused PUTs, on its background thread). The job's scopes,
// and Horovod's process sets of them, have room of their own.
TEST(HorovodStore, AStoreFilledElsewhereStillTakesTheJobsRendezvous) {
  HorovodStoreLimits lim;
  lim.max_keys = 8;
  lim.max_total_bytes = 4096;
  auto sizes = horovod_scope_sizes({"a", "a", "b", "b"}, {0, 1, 0, 1});
  HorovodStore s(sizes, lim);
  int stored = 0;
  while (s.handle("PUT", "/other/k" + std::to_string(stored), "v").status == 200) ++stored;
  EXPECT_EQ(stored, 8);
  for (const auto& [scope, size] : sizes)
    for (const std::string& name : {scope, scope + "_process_set_hash_9f3c2e1b07d4a6e5"})
      EXPECT_EQ(gloo_puts(s, name, size), std::vector<int>(2 * size, 200)) << name;
  EXPECT_EQ(s.keys(), 8u + 2 * 2 * (4 + 2 + 2 + 2 + 2));
  EXPECT_LE(s.bytes(), lim.max_total_bytes + s.reserve().bytes);
  // Only the job's scopes take from that room: elsewhere the store is full.
  EXPECT_EQ(s.handle("PUT", "/other/more", "v").status, 507);
  EXPECT_EQ(s.handle("PUT", "/global_process_set_hash_/1", "v").status, 507);
  EXPECT_EQ(s.handle("PUT", "/other_process_set_hash_1f/1", "v").status, 507);
  EXPECT_TRUE(s.job_scope("cross_1_process_set_hash_0"));
  EXPECT_FALSE(s.job_scope("global_process_set_hash_XY"));
  // Every rank finished: the job's scopes are empty again; the next init fits as well.
  for (const auto& [scope, size] : sizes)
    for (int r = 0; r < size; ++r) EXPECT_EQ(s.handle("DELETE", "/" + scope + "/" + std::to_string(r), "").status, 200);
  EXPECT_EQ(gloo_puts(s, "global", 4), std::vector<int>(8, 200));
}

TEST(HorovodStore, TheJobsRoomGrowsWithItsScopes) {
  auto small = horovod_job_reserve({{"global", 2}});
  auto big = horovod_job_reserve({{"global", 64}, {"local_a", 64}, {"cross_0", 1}});
  EXPECT_EQ(small.keys, 8u);
  EXPECT_EQ(big.keys, 4u * (64 + 64 + 1));
  EXPECT_GE(big.bytes, 2u * 64 * (64 * 136 + 256));
  EXPECT_GT(big.bytes, small.bytes);
}

TEST(HorovodStore, ScopeSizesAsHorovodrun) {
  // Two ranks on a, one on b.
  auto s = horovod_scope_sizes({"a", "a", "b"}, {0, 1, 0});
  std::map<std::string, int> want{{"global", 3}, {"local_a", 2}, {"local_b", 1}, {"cross_0", 2}, {"cross_1", 1}};
  EXPECT_EQ(s, want);
}

TEST(PeerAllowList, LoopbackAndListedAddressesOnly) {
  auto l = PeerAllowList::from({"10.1.2.3", "fd00::7", "fe80::1%eth0"});
  ASSERT_TRUE(l.ok());
  EXPECT_TRUE(l->allows("127.0.0.1"));
  EXPECT_TRUE(l->allows("127.4.5.6"));
  EXPECT_TRUE(l->allows("::1"));
  EXPECT_TRUE(l->allows("10.1.2.3"));
  EXPECT_TRUE(l->allows("::ffff:10.1.2.3"));  // a v4 peer on a dual-stack socket
  EXPECT_TRUE(l->allows("fd00::7"));
  EXPECT_TRUE(l->allows("fe80::1"));
  EXPECT_FALSE(l->allows("10.1.2.4"));
  EXPECT_FALSE(l->allows("::ffff:10.1.2.4"));
  EXPECT_FALSE(l->allows("192.168.0.1"));
  EXPECT_FALSE(l->allows("fd00::8"));
  EXPECT_FALSE(l->allows("not an address"));
  EXPECT_FALSE(l->allows(""));
  auto noloop = PeerAllowList::from({"10.1.2.3"}, false);
  ASSERT_TRUE(noloop.ok());
  EXPECT_FALSE(noloop->allows("127.0.0.1"));
  EXPECT_TRUE(noloop->allows("10.1.2.3"));
  auto bad = PeerAllowList::from({"10.1.2.3", "node7"});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("'node7': not an IPv4 or IPv6 address"), std::string::npos);
}

TEST(HorovodStoreHost, IpAddressesOnly) {
  for (const char* ok : {"", "127.0.0.1", "10.250.0.1:38215", "[::1]", "[fd00::7]:80", "[fe80::1]:1"})
    EXPECT_TRUE(store_host_header_ok(ok)) << ok;
  for (const char* bad : {"localhost", "evil.example.com", "evil.example.com:38215", "127.0.0.1.nip.io", "::1",
                          "[::1", "[::1]x", "10.0.0.1:", "10.0.0.1:80x", "10.0.0.1:123456", "1.2.3", "[nothere]"})
    EXPECT_FALSE(store_host_header_ok(bad)) << bad;
}

}  // namespace
}  // namespace hvdrun::rdv
