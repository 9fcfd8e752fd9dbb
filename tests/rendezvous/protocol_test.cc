#include "rendezvous/protocol.h"

#include <cstring>

#include <gtest/gtest.h>

#include "common/strings.h"
#include "rendezvous/auth.h"

namespace hvdrun::rdv {

Frame roundtrip(MsgType t, const std::string& payload) {
  std::string wire = encode_frame(t, payload);
  auto len = decode_length(wire.data(), kMaxFrame);
  EXPECT_TRUE(len.ok());
  EXPECT_EQ(*len + kHeaderBytes, wire.size());
  auto f = decode_body(std::string_view(wire).substr(kHeaderBytes));
  EXPECT_TRUE(f.ok());
  EXPECT_EQ(f->type, t);
  return *f;
}

TEST(Protocol, MessagesRoundTrip) {
  RegisterRequest q{3, 8, "node2", "10.0.0.2", 41000};
  auto rq = decode_register(roundtrip(MsgType::kRegister, encode_register(q)).payload);
  ASSERT_TRUE(rq.ok());
  EXPECT_EQ(rq->rank, 3);
  EXPECT_EQ(rq->size, 8);
  EXPECT_EQ(rq->host, "node2");
  EXPECT_EQ(rq->addr, "10.0.0.2");
  EXPECT_EQ(rq->port, 41000);
  EXPECT_EQ(rq->round, 0);
  // An elastic register carries its round; a plain one is the same bytes as before rounds.
  RegisterRequest e{1, 4, "h", "a", 3, 7};
  auto re = decode_register(encode_register(e));
  ASSERT_TRUE(re.ok());
  EXPECT_EQ(re->round, 7);
  EXPECT_EQ(encode_register(e).size(), encode_register(RegisterRequest{1, 4, "h", "a", 3}).size() + 4);

  Registered g{8, {2, "a", "1.1.1.1", 1}, {4, "b", "2.2.2.2", 2}};
  auto rg = decode_registered(roundtrip(MsgType::kRegistered, encode_registered(g)).payload);
  ASSERT_TRUE(rg.ok());
  EXPECT_EQ(rg->left, g.left);
  EXPECT_EQ(rg->right, g.right);

  std::string blob(kNcclUniqueIdBytes, '\0');
  for (size_t i = 0; i < blob.size(); ++i) blob[i] = static_cast<char>(i * 7);
  auto kv = decode_key_value(roundtrip(MsgType::kSet, encode_key_value(kNcclUniqueIdKey, blob)).payload);
  ASSERT_TRUE(kv.ok());
  EXPECT_EQ(kv->second, blob);

  auto w = decode_wait(roundtrip(MsgType::kWait, encode_wait(1500, {"a", "b"})).payload);
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(w->first, 1500u);
  EXPECT_EQ(w->second, (std::vector<std::string>{"a", "b"}));
  auto a = decode_add(roundtrip(MsgType::kAdd, encode_add("ctr", -5)).payload);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->second, -5);
  EXPECT_EQ(*decode_i64(encode_i64(1LL << 40)), 1LL << 40);
  auto b = decode_barrier(roundtrip(MsgType::kBarrier, encode_barrier({"hvd/b/3", 16384, 30000})).payload);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->name, "hvd/b/3");
  EXPECT_EQ(b->parties, 16384);
  EXPECT_EQ(b->timeout_ms, 30000u);
  EXPECT_FALSE(decode_barrier(encode_barrier({"x", 0, 1})).ok());  // no parties
  EXPECT_EQ(*decode_keys(encode_keys({"x"})), std::vector<std::string>{"x"});
}

TEST(Protocol, LimitsAndGarbage) {
  char header[4];
  uint32_t big = kMaxFrameBeforeAuth + 1;
  std::memcpy(header, &big, 4);
  auto r = decode_length(header, kMaxFrameBeforeAuth);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("exceeds the limit"), std::string::npos);
  uint32_t tiny = 1;
  std::memcpy(header, &tiny, 4);
  EXPECT_FALSE(decode_length(header, kMaxFrame).ok());

  std::string v2 = encode_frame(MsgType::kHello, "x");
  v2[4] = 2;  // version byte
  auto f = decode_body(std::string_view(v2).substr(4));
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.error().message, "protocol version 2 is not supported (expected 1)");
  std::string unknown = encode_frame(MsgType::kHello, "");
  unknown[5] = 99;
  EXPECT_FALSE(decode_body(std::string_view(unknown).substr(4)).ok());

  // Truncated and padded payloads are refused, never read past.
  std::string reg = encode_register({1, 2, "h", "a", 3});
  for (size_t n = 0; n < reg.size(); ++n) EXPECT_FALSE(decode_register(reg.substr(0, n)).ok()) << n;
  EXPECT_FALSE(decode_register(reg + "x").ok());
  EXPECT_FALSE(decode_register(reg + std::string(4, '\0')).ok());        // round 0 is never sent
  EXPECT_FALSE(decode_register(reg + std::string("\xff\xff\xff\xff", 4)).ok());  // nor a negative one
  EXPECT_FALSE(decode_register(reg + std::string("\x01\0\0\0x", 5)).ok());
  EXPECT_FALSE(decode_string("\xff\xff\xff\x7f").ok());
  EXPECT_FALSE(decode_wait(encode_wait(1, std::vector<std::string>(kMaxWaitKeys + 1, "k"))).ok());
}

// The handshake's two proofs (rendezvous/auth.h, over common/auth: tests/common/auth_test.cc).
TEST(HandshakeProofs, AreMutualAndSecretBound) {
  std::string s1 = new_secret(), s2 = new_secret();
  std::string cn = random_bytes(kNonceBytes), sn = random_bytes(kNonceBytes);
  EXPECT_EQ(server_proof(s1, cn, sn), server_proof(s1, cn, sn));
  EXPECT_NE(server_proof(s1, cn, sn), server_proof(s2, cn, sn));
  // A server proof can never serve as a client proof (domain separation).
  EXPECT_NE(server_proof(s1, cn, sn), client_proof(s1, cn, sn));
  EXPECT_NE(server_proof(s1, cn, sn), client_proof(s1, sn, cn));
}

}  // namespace hvdrun::rdv
