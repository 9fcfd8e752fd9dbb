// Authenticated data-plane pairs over real TCP sockets.
#include "transport/pair.h"

#include <future>
#include <gtest/gtest.h>

#include "common/auth.h"
#include "transport/socket_util.h"

namespace hvdrun::transport {
namespace {

PairOptions opts(const std::string& secret, int self) {
  PairOptions o;
  o.secret = secret;
  o.self_rank = self;
  o.deadline = Clock::now() + std::chrono::seconds(10);
  return o;
}

}  // namespace

TEST(Pair, StrangersAndOtherJobsAreRefusedTheRightPeerIsAccepted) {
  std::string secret = auth::new_secret();
  auto l = listen_tcp("127.0.0.1", "127.0.0.1");
  ASSERT_TRUE(l.ok());
  PeerAddress me{1, "h1", "127.0.0.1", l->port};
  PeerAddress left{0, "h0", "127.0.0.1", 0};
  auto accepted = std::async(std::launch::async, [&] { return accept_pair(l->fd.get(), left, opts(secret, 1)); });
  // Another job's rank 0 (another secret): its handshake fails on its side and ours.
  auto other = connect_pair(me, opts(auth::new_secret(), 0));
  ASSERT_FALSE(other.ok());
  EXPECT_NE(other.error().message.find("failed authentication"), std::string::npos) << other.error().message;
  // This job's rank 2 claiming to be our left neighbour is not rank 0: refused.
  auto wrong_rank = connect_pair(me, [&] {
    auto o = opts(secret, 2);
    o.deadline = Clock::now() + std::chrono::milliseconds(500);
    return o;
  }());
  EXPECT_FALSE(wrong_rank.ok());
  // The real left neighbour gets through, and bytes flow.
  auto good = connect_pair(me, opts(secret, 0));
  ASSERT_TRUE(good.ok()) << good.error().message;
  auto in = accepted.get();
  ASSERT_TRUE(in.ok()) << in.error().message;
  EXPECT_EQ(in->peer().rank, 0);
  std::string msg(1 << 20, 'x'), got(1 << 20, '\0');
  TransferSpec spec;
  spec.send = msg.data();
  spec.send_len = msg.size();
  spec.recv = got.data();
  spec.recv_len = got.size();
  ASSERT_TRUE(transfer(&*good, &*in, spec, 10, 50).ok());
  EXPECT_EQ(got, msg);
}

TEST(Pair, ClosedPeerIsNamed) {
  std::string secret = auth::new_secret();
  auto l = listen_tcp("127.0.0.1", "127.0.0.1");
  ASSERT_TRUE(l.ok());
  PeerAddress me{1, "h1", "127.0.0.1", l->port};
  auto accepted = std::async(std::launch::async,
                             [&] { return accept_pair(l->fd.get(), {0, "node-a", "127.0.0.1", 0}, opts(secret, 1)); });
  auto out = connect_pair(me, opts(secret, 0));
  ASSERT_TRUE(out.ok());
  auto in = accepted.get();
  ASSERT_TRUE(in.ok());
  out->close();
  char buf[16];
  TransferSpec spec;
  spec.recv = buf;
  spec.recv_len = sizeof buf;
  Pair unused;
  auto s = transfer(&unused, &*in, spec, 10, 0);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().message, "connection to rank 0 (host node-a) closed (the peer exited or failed)");
}

}  // namespace hvdrun::transport
