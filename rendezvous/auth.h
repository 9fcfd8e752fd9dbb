// The job secret and the mutual HMAC-SHA256 challenge-response (OpenSSL's libcrypto).
//   client -> server: hello(client_nonce)
//   server -> client: challenge(server_nonce, HMAC(secret, "hvdrun-server" | client_nonce | server_nonce))
//   client -> server: auth(HMAC(secret, "hvdrun-client" | server_nonce | client_nonce))
// Each side checks the other's proof with a constant-time compare. The same proofs open
// the workers' data-plane connections (with their ranks mixed in).
#pragma once

#include <string>
#include <string_view>

#include "common/result.h"

namespace hvdrun::rdv {

constexpr size_t kSecretBytes = 32;

std::string random_bytes(size_t n);
std::string new_secret();  // 32 random bytes
// Parses HVDRUN_SECRET (64 hex digits).
Result<std::string> secret_from_hex(std::string_view hex);

std::string hmac_sha256(std::string_view key, std::string_view message);
std::string server_proof(std::string_view secret, std::string_view client_nonce, std::string_view server_nonce);
std::string client_proof(std::string_view secret, std::string_view server_nonce, std::string_view client_nonce);
bool constant_time_equal(std::string_view a, std::string_view b);

}  // namespace hvdrun::rdv
