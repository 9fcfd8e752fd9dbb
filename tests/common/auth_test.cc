// The job secret and HMAC-SHA256 proofs (common/auth). The rendezvous handshake's use of
// them (server and client proofs): tests/rendezvous/protocol_test.cc.
#include "common/auth.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "common/strings.h"

namespace hvdrun::auth {
namespace {

TEST(Auth, SecretsAndNoncesAreFreshRandomBytes) {
  std::set<std::string> seen;
  for (int i = 0; i < 100; ++i) {
    std::string s = new_secret();
    EXPECT_EQ(s.size(), kSecretBytes);
    EXPECT_TRUE(seen.insert(s).second) << "a secret came twice";
  }
  EXPECT_EQ(random_bytes(0), "");
  EXPECT_EQ(random_bytes(kNonceBytes).size(), kNonceBytes);
  EXPECT_NE(random_bytes(kNonceBytes), random_bytes(kNonceBytes));
}

// RFC 4231's test cases 1, 2 and 6 (a key longer than the block).
TEST(Auth, HmacSha256MatchesRfc4231) {
  EXPECT_EQ(hmac_sha256(std::string(20, '\x0b'), "Hi There"),
            *from_hex("b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"));
  EXPECT_EQ(hmac_sha256("Jefe", "what do ya want for nothing?"),
            *from_hex("5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"));
  EXPECT_EQ(hmac_sha256(std::string(131, '\xaa'), "Test Using Larger Than Block-Size Key - Hash Key First"),
            *from_hex("60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"));
  EXPECT_EQ(hmac_sha256("k", "").size(), kMacBytes);
}

// A proof binds the secret, the role's label and both nonces in their order.
TEST(Auth, AProofBindsSecretLabelAndBothNoncesInOrder) {
  std::string s = new_secret(), a = random_bytes(kNonceBytes), b = random_bytes(kNonceBytes);
  std::string p = proof(s, "server", a, b);
  EXPECT_EQ(p.size(), kMacBytes);
  EXPECT_EQ(p, proof(s, "server", a, b));
  EXPECT_NE(p, proof(new_secret(), "server", a, b));
  EXPECT_NE(p, proof(s, "client", a, b));
  EXPECT_NE(p, proof(s, "server", b, a));
  EXPECT_NE(p, proof(s, "server", a, random_bytes(kNonceBytes)));
}

TEST(Auth, ConstantTimeEqualIsEquality) {
  EXPECT_TRUE(constant_time_equal("", ""));
  EXPECT_TRUE(constant_time_equal("abc", "abc"));
  EXPECT_FALSE(constant_time_equal("abc", "abd"));
  EXPECT_FALSE(constant_time_equal("abd", "abc"));
  EXPECT_FALSE(constant_time_equal("abc", "ab"));
  EXPECT_FALSE(constant_time_equal("ab", "abc"));
  EXPECT_FALSE(constant_time_equal(std::string("a\0c", 3), std::string("a\0d", 3)));
}

TEST(Auth, SecretFromHexTakesExactly64HexDigits) {
  auto s = secret_from_hex(std::string(62, '0') + "Ff");
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_EQ(s->size(), kSecretBytes);
  EXPECT_EQ(static_cast<unsigned char>(s->back()), 0xffu);
  for (const std::string& bad : {std::string(63, 'a'), std::string(66, 'a'), std::string(64, 'g'), std::string()}) {
    auto r = secret_from_hex(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.error().message, "HVDRUN_SECRET is malformed: expected 64 hex digits");
  }
}

}  // namespace
}  // namespace hvdrun::auth
