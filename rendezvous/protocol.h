// The rendezvous wire protocol (docs/RENDEZVOUS.md). Every frame is
//   u32 length (of what follows) | u8 version | u8 type | payload
// little-endian. Pure encode/decode; no I/O.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace hvdrun::rdv {

constexpr uint8_t kProtocolVersion = 1;
constexpr size_t kHeaderBytes = 4;
constexpr size_t kMaxFrameBeforeAuth = 256;       // hello and auth frames are tiny
constexpr size_t kMaxFrame = 4u << 20;            // after authentication
constexpr size_t kNonceBytes = 32;  // = auth::kNonceBytes
constexpr size_t kMacBytes = 32;    // = auth::kMacBytes
constexpr size_t kMaxKeyBytes = 1024;
constexpr size_t kMaxWaitKeys = 1024;
// The job's key-value store is bounded (docs/RENDEZVOUS.md): a value is at most 1 MiB, and
// all keys and values together (each entry counted with kStoreEntryOverhead more) at most
// 64 MiB. A request past a bound gets an error; the store and the job go on.
constexpr size_t kMaxValueBytes = 1u << 20;
constexpr size_t kMaxStoreBytes = 64u << 20;
constexpr size_t kStoreEntryOverhead = 64;
// Requests still waiting for an answer (wait, barrier) on one connection.
constexpr size_t kMaxPendingWaits = 64;

// Rank 0 publishes NCCL's 128-byte unique id under this key; the other ranks wait for it.
constexpr const char* kNcclUniqueIdKey = "hvdrun/nccl/unique_id";
constexpr size_t kNcclUniqueIdBytes = 128;

enum class MsgType : uint8_t {
  // Handshake (both directions proved with HMAC-SHA256 of the job secret).
  kHello = 1,      // c->s: client nonce
  kChallenge = 2,  // s->c: server nonce, server proof
  kAuth = 3,       // c->s: client proof
  kAuthOk = 4,     // reserved (version 1 answers a good auth with the first reply)
  kError = 5,      // s->c: message; the server closes after it
  kAuthFailed = 6, // s->c: message; the client's proof was wrong; the server closes after it
  // Registration.
  kRegister = 10,    // c->s: rank, size, host, data address, data port
  kRegistered = 11,  // s->c (when every rank has registered): left and right neighbours
  kGetPeer = 12,     // c->s: rank
  kPeer = 13,        // s->c: PeerInfo
  // Key-value store, scoped to the job.
  kSet = 20,       // c->s: key, value
  kGet = 21,       // c->s: key
  kWait = 22,      // c->s: timeout ms, keys
  kAdd = 23,       // c->s: key, delta
  kValue = 24,     // s->c: value
  kOk = 25,        // s->c
  kNotFound = 26,  // s->c
  kTimeout = 27,   // s->c: the keys still missing
  kCounter = 28,   // s->c: i64 after add
  kBarrier = 29,   // c->s: name, parties i32, timeout ms u32 -> ok / timeout
  // Fatal error of a worker: hvdrun tears the job down with this message.
  kFatal = 30,  // c->s: message
  // Elastic: a kRegister for a round that is over (or not begun); the connection stays
  // open and the worker reads the newest round's assignment (docs/ELASTIC.md) and tries again.
  // Also the answer to a kGetPeer on a connection whose registered round is over.
  kStaleRound = 31,  // s->c: i64 the server's current round
};

const char* msg_type_name(MsgType t);

// hvd_shutdown sets this key + its rank ("hvdrun/finalized/3") before it disconnects; a
// registered rank whose connection ends without it left the job early.
constexpr const char* kFinalizedKeyPrefix = "hvdrun/finalized/";
// A rank whose collective made no progress within HVDRUN_TIMEOUT sets this key + its rank
// to the rank it waited on ("hvdrun/silent/3" = "2"), then reports the time-out (kFatal):
// hvdrun weighs such reports to name the rank that stalled the job.
constexpr const char* kSilentKeyPrefix = "hvdrun/silent/";
// A rank whose collective failed on a peer's closed connection sets this key + its rank to
// that peer ("hvdrun/lost/0" = "4") before it returns the error: hvdrun blames a lost peer
// that exited 0 or left, whichever host's report reaches it first.
constexpr const char* kLostKeyPrefix = "hvdrun/lost/";
// Elastic: rank 0 of round N sets this key + N to the commit the round starts from
// (hvd_elastic_commit): hvdrun's reset line names it.
constexpr const char* kElasticCommitKeyPrefix = "hvdrun/elastic/commit/";
// libhvdrun's stall report (collectives/runtime.cc) for hvdrun: rank 0's warning, which
// hvdrun prints as it comes, and the report of a stall past the shutdown time (then also
// sent as the rank's fatal report). The server hands every key under the prefix to hvdrun.
constexpr const char* kStallKeyPrefix = "hvdrun/stall/";
constexpr const char* kStallWarningKey = "hvdrun/stall/warning";
constexpr const char* kStallShutdownKey = "hvdrun/stall/shutdown";

struct Frame {
  uint8_t version = kProtocolVersion;
  MsgType type = MsgType::kError;
  std::string payload;
};

// Encodes a whole frame, header included.
std::string encode_frame(MsgType type, std::string_view payload);
// Reads the length from a 4-byte header; an error when it exceeds `max_frame` or is < 2.
Result<uint32_t> decode_length(const char header[kHeaderBytes], size_t max_frame);
// Decodes the body (version, type, payload) that followed a header. Rejects other versions.
Result<Frame> decode_body(std::string_view body);

struct PeerInfo {
  int32_t rank = -1;
  std::string host;  // as written in -H
  std::string addr;  // data-plane address
  int32_t port = 0;
  bool operator==(const PeerInfo&) const = default;
};

struct RegisterRequest {
  int32_t rank = -1, size = 0;
  std::string host, addr;
  int32_t port = 0;
  // Elastic: the round whose rank this is (docs/ELASTIC.md); 0 outside an elastic job, and
  // then not on the wire (the payload of a non-elastic register is unchanged).
  int32_t round = 0;
};

struct Registered {
  int32_t size = 0;
  PeerInfo left, right;
};

std::string encode_register(const RegisterRequest& r);
Result<RegisterRequest> decode_register(std::string_view payload);
std::string encode_peer(const PeerInfo& p);
Result<PeerInfo> decode_peer(std::string_view payload);
std::string encode_registered(const Registered& r);
Result<Registered> decode_registered(std::string_view payload);

std::string encode_key_value(std::string_view key, std::string_view value);
Result<std::pair<std::string, std::string>> decode_key_value(std::string_view payload);
std::string encode_wait(uint32_t timeout_ms, const std::vector<std::string>& keys);
Result<std::pair<uint32_t, std::vector<std::string>>> decode_wait(std::string_view payload);
std::string encode_add(std::string_view key, int64_t delta);
Result<std::pair<std::string, int64_t>> decode_add(std::string_view payload);
struct BarrierRequest {
  std::string name;
  int32_t parties = 0;
  uint32_t timeout_ms = 0;
};
std::string encode_barrier(const BarrierRequest& b);
Result<BarrierRequest> decode_barrier(std::string_view payload);
std::string encode_string(std::string_view s);
Result<std::string> decode_string(std::string_view payload);
std::string encode_i64(int64_t v);
Result<int64_t> decode_i64(std::string_view payload);
std::string encode_keys(const std::vector<std::string>& keys);
Result<std::vector<std::string>> decode_keys(std::string_view payload);

}  // namespace hvdrun::rdv
