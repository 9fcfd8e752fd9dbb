#include "rendezvous/auth.h"

#include <openssl/crypto.h>
#include <openssl/hmac.h>
#include <sys/random.h>

#include <cerrno>
#include <stdexcept>

#include "common/strings.h"

namespace hvdrun::rdv {

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
    return make_error("HVDRUN_SECRET is malformed: expected " + std::to_string(2 * kSecretBytes) + " hex digits");
  return raw;
}

std::string hmac_sha256(std::string_view key, std::string_view message) {
  unsigned char out[32];
  unsigned int len = sizeof out;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), reinterpret_cast<const unsigned char*>(message.data()),
       message.size(), out, &len);
  return std::string(reinterpret_cast<char*>(out), len);
}

std::string server_proof(std::string_view secret, std::string_view client_nonce, std::string_view server_nonce) {
  std::string m = "hvdrun-server";
  m.append(client_nonce);
  m.append(server_nonce);
  return hmac_sha256(secret, m);
}

std::string client_proof(std::string_view secret, std::string_view server_nonce, std::string_view client_nonce) {
  std::string m = "hvdrun-client";
  m.append(server_nonce);
  m.append(client_nonce);
  return hmac_sha256(secret, m);
}

bool constant_time_equal(std::string_view a, std::string_view b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace hvdrun::rdv
