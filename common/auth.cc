#include "common/auth.h"

#include <openssl/crypto.h>
#include <openssl/hmac.h>
#include <sys/random.h>

#include <cerrno>
#include <stdexcept>

#include "common/strings.h"

namespace hvdrun::auth {

std::string random_bytes(size_t n) {
  std::string out(n, '\0');
  size_t got = 0;
  while (got < n) {
    ssize_t r = getrandom(out.data() + got, n - got, 0);
    if (r < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error("getrandom failed");
    }
    got += static_cast<size_t>(r);
  }
  return out;
}

std::string new_secret() { return random_bytes(kSecretBytes); }

Result<std::string> secret_from_hex(std::string_view hex) {
  auto raw = from_hex(hex);
  if (!raw || raw->size() != kSecretBytes)
    return make_error(ErrorKind::kMalformed,
                      "HVDRUN_SECRET is malformed: expected " + std::to_string(2 * kSecretBytes) + " hex digits");
  return raw;
}

std::string hmac_sha256(std::string_view key, std::string_view message) {
  unsigned char out[32];
  unsigned int len = sizeof out;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), reinterpret_cast<const unsigned char*>(message.data()),
       message.size(), out, &len);
  return std::string(reinterpret_cast<char*>(out), len);
}

std::string proof(std::string_view secret, std::string_view label, std::string_view a, std::string_view b) {
  std::string m(label);
  m.append(a);
  m.append(b);
  return hmac_sha256(secret, m);
}

bool constant_time_equal(std::string_view a, std::string_view b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace hvdrun::auth
