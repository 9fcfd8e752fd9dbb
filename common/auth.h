// The job secret and HMAC-SHA256 proofs (OpenSSL's libcrypto), shared by the rendezvous
// handshake (rendezvous/auth.h) and the data-plane pair handshake (transport/pair.cc).
// A proof is HMAC(secret, label | context); each side checks the other's with a
// constant-time compare.
#pragma once

#include <string>
#include <string_view>

#include "common/result.h"

namespace hvdrun::auth {

constexpr size_t kSecretBytes = 32;
constexpr size_t kNonceBytes = 32;
constexpr size_t kMacBytes = 32;

std::string random_bytes(size_t n);
std::string new_secret();  // 32 random bytes
// Parses HVDRUN_SECRET (64 hex digits).
Result<std::string> secret_from_hex(std::string_view hex);

std::string hmac_sha256(std::string_view key, std::string_view message);
// HMAC(secret, label | a | b): a proof bound to a role (label) and both sides' nonces.
std::string proof(std::string_view secret, std::string_view label, std::string_view a, std::string_view b);
bool constant_time_equal(std::string_view a, std::string_view b);

}  // namespace hvdrun::auth
