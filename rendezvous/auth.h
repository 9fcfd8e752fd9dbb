// The rendezvous' mutual HMAC-SHA256 challenge-response, built on common/auth.h:
//   client -> server: hello(client_nonce)
//   server -> client: challenge(server_nonce, HMAC(secret, "hvdrun-server" | client_nonce | server_nonce))
//   client -> server: auth(HMAC(secret, "hvdrun-client" | server_nonce | client_nonce))
// Each side checks the other's proof with a constant-time compare. The data-plane pairs
// use the same primitives with their ranks mixed in (transport/pair.cc).
#pragma once

#include <string>
#include <string_view>

#include "common/auth.h"

namespace hvdrun::rdv {

using auth::constant_time_equal;
using auth::hmac_sha256;
using auth::kSecretBytes;
using auth::new_secret;
using auth::random_bytes;
using auth::secret_from_hex;

inline std::string server_proof(std::string_view secret, std::string_view client_nonce, std::string_view server_nonce) {
  return auth::proof(secret, "hvdrun-server", client_nonce, server_nonce);
}
inline std::string client_proof(std::string_view secret, std::string_view server_nonce, std::string_view client_nonce) {
  return auth::proof(secret, "hvdrun-client", server_nonce, client_nonce);
}

}  // namespace hvdrun::rdv
