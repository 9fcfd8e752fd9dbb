#include "rendezvous/protocol.h"

#include "rendezvous/wire.h"

namespace hvdrun::rdv {
namespace {

Error malformed(const char* what) { return make_error(ErrorKind::kMalformed,
                                                      std::string("malformed ") + what + " message"); }
                                                          
                                                          void put_peer(Writer& w, const PeerInfo& p) {
  w.i32(p.rank);
  w.str(p.host);
  w.str(p.addr);
  w.i32(p.port);
}

bool get_peer(Reader& r, PeerInfo& p) {
  return r.i32(p.rank) && r.str(p.host, 1024) && r.str(p.addr, 1024) && r.i32(p.port);
}

void put_keys(Writer& w, const std::vector<std::string>& keys) {
  w.u32(static_cast<uint32_t>(keys.size()));
  for (const auto& k : keys) w.str(k);
}

bool get_keys(Reader& r, std::vector<std::string>& keys) {
  uint32_t n;
  if (!r.u32(n) || n > kMaxWaitKeys) return false;
  keys.resize(n);
  for (auto& k : keys)
    if (!r.str(k, kMaxKeyBytes)) return false;
  return true;
}

}  // namespace

const char* msg_type_name(MsgType t) {
  switch (t) {
    case MsgType::kHello: return "hello";
    case MsgType::kChallenge: return "challenge";
    case MsgType::kAuth: return "auth";
    case MsgType::kAuthOk: return "auth-ok";
    case MsgType::kError: return "error";
    case MsgType::kAuthFailed: return "auth-failed";
    case MsgType::kRegister: return "register";
    case MsgType::kRegistered: return "registered";
    case MsgType::kGetPeer: return "get-peer";
    case MsgType::kPeer: return "peer";
    case MsgType::kSet: return "set";
    case MsgType::kGet: return "get";
    case MsgType::kWait: return "wait";
    case MsgType::kAdd: return "add";
    case MsgType::kValue: return "value";
    case MsgType::kOk: return "ok";
    case MsgType::kNotFound: return "not-found";
    case MsgType::kTimeout: return "timeout";
    case MsgType::kCounter: return "counter";
    case MsgType::kBarrier: return "barrier";
    case MsgType::kFatal: return "fatal";
    case MsgType::kStaleRound: return "stale round";
  }
  return "unknown";
}

std::string encode_frame(MsgType type, std::string_view payload) {
  Writer w;
  w.u32(static_cast<uint32_t>(payload.size() + 2));
  w.u8(kProtocolVersion);
  w.u8(static_cast<uint8_t>(type));
  w.raw(payload.data(), payload.size());
  return w.take();
}

Result<uint32_t> decode_length(const char header[kHeaderBytes], size_t max_frame) {
  uint32_t len;
  std::memcpy(&len, header, 4);
  if (len < 2) return make_error(ErrorKind::kMalformed, "frame too short (" + std::to_string(len) + " bytes)");
  if (len > max_frame)
    return make_error(ErrorKind::kMalformed,
                      "frame of " + std::to_string(len) + " bytes exceeds the limit of " + std::to_string(max_frame));
  return len;
}

Result<Frame> decode_body(std::string_view body) {
  Reader r(body);
  Frame f;
  uint8_t type;
  if (!r.u8(f.version) || !r.u8(type)) return make_error(ErrorKind::kMalformed, "frame too short");
  if (f.version != kProtocolVersion)
    return make_error(ErrorKind::kMalformed,
                      "protocol version " + std::to_string(f.version) + " is not supported (expected " +
                          std::to_string(kProtocolVersion) + ")");
  f.type = static_cast<MsgType>(type);
  if (std::string(msg_type_name(f.type)) == "unknown")
    return make_error(ErrorKind::kMalformed, "unknown message type " + std::to_string(type));
  f.payload.assign(body.substr(2));
  return f;
}

std::string encode_register(const RegisterRequest& q) {
  Writer w;
  w.i32(q.rank);
  w.i32(q.size);
  w.str(q.host);
  w.str(q.addr);
  w.i32(q.port);
  if (q.round != 0) w.i32(q.round);
  return w.take();
}

Result<RegisterRequest> decode_register(std::string_view payload) {
  Reader r(payload);
  RegisterRequest q;
  if (!(r.i32(q.rank) && r.i32(q.size) && r.str(q.host, 1024) && r.str(q.addr, 1024) && r.i32(q.port)))
    return malformed("register");
  if (!r.done() && !(r.i32(q.round) && q.round > 0)) return malformed("register");
  if (!r.done()) return malformed("register");
  return q;
}

std::string encode_peer(const PeerInfo& p) {
  Writer w;
  put_peer(w, p);
  return w.take();
}

Result<PeerInfo> decode_peer(std::string_view payload) {
  Reader r(payload);
  PeerInfo p;
  if (!(get_peer(r, p) && r.done())) return malformed("peer");
  return p;
}

std::string encode_registered(const Registered& g) {
  Writer w;
  w.i32(g.size);
  put_peer(w, g.left);
  put_peer(w, g.right);
  return w.take();
}

Result<Registered> decode_registered(std::string_view payload) {
  Reader r(payload);
  Registered g;
  if (!(r.i32(g.size) && get_peer(r, g.left) && get_peer(r, g.right) && r.done())) return malformed("registered");
  return g;
}

std::string encode_key_value(std::string_view key, std::string_view value) {
  Writer w;
  w.str(key);
  w.str(value);
  return w.take();
}

Result<std::pair<std::string, std::string>> decode_key_value(std::string_view payload) {
  Reader r(payload);
  std::pair<std::string, std::string> kv;
  if (!(r.str(kv.first, kMaxKeyBytes) && r.str(kv.second, kMaxFrame) && r.done())) return malformed("set");
  return kv;
}

std::string encode_wait(uint32_t timeout_ms, const std::vector<std::string>& keys) {
  Writer w;
  w.u32(timeout_ms);
  put_keys(w, keys);
  return w.take();
}

Result<std::pair<uint32_t, std::vector<std::string>>> decode_wait(std::string_view payload) {
  Reader r(payload);
  uint32_t timeout;
  std::vector<std::string> keys;
  if (!(r.u32(timeout) && get_keys(r, keys) && r.done())) return malformed("wait");
  return std::make_pair(timeout, std::move(keys));
}

std::string encode_add(std::string_view key, int64_t delta) {
  Writer w;
  w.str(key);
  w.i64(delta);
  return w.take();
}

Result<std::pair<std::string, int64_t>> decode_add(std::string_view payload) {
  Reader r(payload);
  std::pair<std::string, int64_t> a;
  if (!(r.str(a.first, kMaxKeyBytes) && r.i64(a.second) && r.done())) return malformed("add");
  return a;
}

std::string encode_barrier(const BarrierRequest& b) {
  Writer w;
  w.str(b.name);
  w.i32(b.parties);
  w.u32(b.timeout_ms);
  return w.take();
}

Result<BarrierRequest> decode_barrier(std::string_view payload) {
  Reader r(payload);
  BarrierRequest b;
  if (!(r.str(b.name, kMaxKeyBytes) && r.i32(b.parties) && r.u32(b.timeout_ms) && r.done()) || b.parties < 1)
    return malformed("barrier");
  return b;
}

std::string encode_string(std::string_view s) {
  Writer w;
  w.str(s);
  return w.take();
}

Result<std::string> decode_string(std::string_view payload) {
  Reader r(payload);
  std::string s;
  if (!(r.str(s, kMaxFrame) && r.done())) return malformed("string");
  return s;
}

std::string encode_i64(int64_t v) {
  Writer w;
  w.i64(v);
  return w.take();
}

Result<int64_t> decode_i64(std::string_view payload) {
  Reader r(payload);
  int64_t v;
  if (!(r.i64(v) && r.done())) return malformed("counter");
  return v;
}

std::string encode_keys(const std::vector<std::string>& keys) {
  Writer w;
  put_keys(w, keys);
  return w.take();
}

Result<std::vector<std::string>> decode_keys(std::string_view payload) {
  Reader r(payload);
  std::vector<std::string> keys;
  if (!(get_keys(r, keys) && r.done())) return malformed("keys");
  return keys;
}

}  // namespace hvdrun::rdv
