// The rendezvous client as the collectives' store (collectives/rendezvous_store.cc), over a
// real rendezvous server.
#include "collectives/rendezvous_store.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <future>

#include "common/deadline.h"
#include "rendezvous/auth.h"
#include "rendezvous/server.h"

namespace hvdrun {
namespace {

struct Job {
  std::string secret = rdv::new_secret();
  std::unique_ptr<rdv::Server> server;
  explicit Job(int size) {
    rdv::ServerOptions o;
    o.secret = secret;
    for (int r = 0; r < size; ++r) o.ranks.push_back({"h", r});
    auto s = rdv::Server::start(o, {});
    EXPECT_TRUE(s.ok()) << s.error().message;
    server = std::move(*s);
  }
  rdv::Client client() {
    auto c = rdv::Client::connect("127.0.0.1", server->port(), secret, deadline_in(10));
    EXPECT_TRUE(c.ok()) << c.error().message;
    return std::move(*c);
  }
};

TEST(RendezvousStore, KeysGoThroughTheServer) {
  Job job(2);
  auto c0 = job.client(), c1 = job.client();
  RendezvousStore s0(&c0), s1(&c1);
  auto waiter = std::async(std::launch::async, [&] { return s1.wait({"k"}, 20); });
  ASSERT_TRUE(s0.set("k", "v").ok());
  ASSERT_EQ(waiter.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  ASSERT_TRUE(waiter.get().ok());
  auto v = s1.get("k");
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, "v");
  EXPECT_FALSE(s1.get("absent").ok());
}

TEST(RendezvousStore, TimeOutsHaveTheTimeoutKind) {
  Job job(2);
  auto c = job.client();
  RendezvousStore s(&c);
  auto w = s.wait({"never"}, 0.1);
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.error().kind, ErrorKind::kTimeout);
  EXPECT_EQ(w.error().sys_errno, ETIMEDOUT);
  auto b = s.barrier("alone", 2, 0.1);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.error().kind, ErrorKind::kTimeout);
}

TEST(RendezvousStore, BarrierAndPeerAddressesAfterRegistration) {
  Job job(2);
  auto registered = [&](int r) {
    return std::async(std::launch::async, [&job, r]() -> std::string {
      auto c = job.client();
      rdv::RegisterRequest req{r, 2, "h", "10.0.0." + std::to_string(r + 1), 4000 + r};
      if (auto reg = c.register_rank(req, deadline_in(10)); !reg) return reg.error().message;
      RendezvousStore s(&c);
      if (auto b = s.barrier("both", 2, 10); !b) return b.error().message;
      auto p = s.peer(1 - r, deadline_in(10));
      if (!p) return p.error().message;
      if (p->rank != 1 - r || p->host != "h" || p->addr != "10.0.0." + std::to_string(2 - r) || p->port != 4001 - r)
        return "wrong address of rank " + std::to_string(1 - r) + ": " + p->addr + ":" + std::to_string(p->port);
      return "";
    });
  };
  auto r0 = registered(0), r1 = registered(1);
  for (auto* f : {&r0, &r1}) {
    ASSERT_EQ(f->wait_for(std::chrono::seconds(20)), std::future_status::ready);
    EXPECT_EQ(f->get(), "");
  }
}

}  // namespace
}  // namespace hvdrun
