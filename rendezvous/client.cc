#include "rendezvous/client.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "common/deadline.h"
#include "common/net.h"
#include "common/socket_io.h"
#include "rendezvous/auth.h"

namespace hvdrun::rdv {

Result<Client> Client::connect(const std::string& addr, int port, const std::string& secret,
                               Clock::time_point deadline) {
  Client c;
  c.endpoint_ = addr + ":" + std::to_string(port);
  addrinfo hints{}, *res = nullptr;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  int gai = getaddrinfo(addr.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (gai != 0) return make_error(ErrorKind::kRendezvous, "rendezvous " + c.endpoint_ + ": " + gai_strerror(gai));
  sockaddr_storage sa{};
  socklen_t salen = static_cast<socklen_t>(res->ai_addrlen);
  std::memcpy(&sa, res->ai_addr, res->ai_addrlen);
  freeaddrinfo(res);

  auto fd = connect_tcp_retrying(reinterpret_cast<const sockaddr*>(&sa), salen, deadline, Refused::kRetry);
  if (!fd) return with_kind(wrap(fd.error(), "rendezvous " + c.endpoint_ + ": connect"), ErrorKind::kRendezvous);
  int one = 1;
  setsockopt(fd->get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  c.fd_ = std::move(*fd);

  // Mutual authentication.
  std::string client_nonce = random_bytes(kNonceBytes);
  if (auto s = c.send(MsgType::kHello, client_nonce, deadline); !s) return s.error();
  auto ch = c.recv(deadline, kMaxFrameBeforeAuth);
  if (!ch) return ch.error();
  if (ch->type != MsgType::kChallenge || ch->payload.size() != kNonceBytes + kMacBytes)
    return make_error(ErrorKind::kRendezvous,
                      "rendezvous " + c.endpoint_ + ": unexpected reply to hello (" + msg_type_name(ch->type) + ")");
  std::string server_nonce = ch->payload.substr(0, kNonceBytes);
  if (!constant_time_equal(ch->payload.substr(kNonceBytes), server_proof(secret, client_nonce, server_nonce)))
    return make_error(ErrorKind::kAuth, "rendezvous " + c.endpoint_ +
                      ": the server failed authentication (wrong HVDRUN_SECRET, or not this job's hvdrun)");
  if (auto s = c.send(MsgType::kAuth, client_proof(secret, server_nonce, client_nonce), deadline); !s)
    return s.error();
  // A good proof gets no answer of its own: the reply to our first request says it, and
  // a bad one gets an error there instead.
  return c;
}

Status Client::send(MsgType type, const std::string& payload, Clock::time_point deadline) {
  std::string frame = encode_frame(type, payload);
  if (auto s = write_exact(fd_.get(), frame.data(), frame.size(), deadline); !s) {
    if (s.error().kind == ErrorKind::kTimeout) return with_message(s.error(), "rendezvous " + endpoint_ + ": send timed out");
    return lost(s.error());
  }
  return {};
}

Result<Frame> Client::recv(Clock::time_point deadline, size_t max_frame) {
  auto read = [&](char* buf, size_t len) -> Status {
    auto s = read_exact(fd_.get(), buf, len, deadline);
    if (s) return s;
    if (s.error().kind == ErrorKind::kPeerLost)
      return make_error(ErrorKind::kRendezvous, "rendezvous " + endpoint_ + ": connection lost (closed by hvdrun)");
    if (s.error().kind == ErrorKind::kTimeout)
      return with_message(s.error(), "rendezvous " + endpoint_ + ": no reply before the deadline");
    return lost(s.error());
  };
  char header[kHeaderBytes];
  if (auto s = read(header, sizeof header); !s) return s.error();
  auto len = decode_length(header, max_frame);
  if (!len) return wrap(len.error(), "rendezvous " + endpoint_);
  std::string body(*len, '\0');
  if (auto s = read(body.data(), body.size()); !s) return s.error();
  auto f = decode_body(body);
  if (!f) return wrap(f.error(), "rendezvous " + endpoint_);
  if (f->type == MsgType::kAuthFailed)
    return make_error(ErrorKind::kAuth,
                      "rendezvous " + endpoint_ + ": authentication refused by the server (wrong HVDRUN_SECRET?)");
  if (f->type == MsgType::kError) {
    auto m = decode_string(f->payload);
    return make_error(ErrorKind::kRendezvous, "rendezvous " + endpoint_ + ": " + (m ? *m : std::string("error")));
  }
  return f;
}

Error Client::lost(const Error& e) const {
  return with_message(with_kind(e, ErrorKind::kRendezvous),
                      "rendezvous " + endpoint_ + ": connection lost (" + e.message + ")");
}

Result<Frame> Client::call(MsgType type, const std::string& payload, Clock::time_point deadline) {
  if (auto s = send(type, payload, deadline); !s) return s.error();
  return recv(deadline);
}

Result<Registered> Client::register_rank(const RegisterRequest& req, Clock::time_point deadline) {
  return registered(call(MsgType::kRegister, encode_register(req), deadline));
}

Result<Registered> Client::registered(Result<Frame> f) const {
  if (!f) {
    if (f.error().kind == ErrorKind::kTimeout)
      return with_message(f.error(),
                          "rendezvous " + endpoint_ + ": not every rank registered before the start time-out");
    return f.error();
  }
  if (f->type != MsgType::kRegistered) return make_error(ErrorKind::kRendezvous,
                                                         "rendezvous: unexpected reply to register");
  return decode_registered(f->payload);
}

Result<Registered> Client::register_in_round(RegisterRequest req, const RoundRequest& for_round,
                                             Clock::time_point deadline) {
  auto pause = std::chrono::milliseconds(5);
  for (;;) {
    auto f = call(MsgType::kRegister, encode_register(req), deadline);
    if (!f || f->type != MsgType::kStaleRound) return registered(std::move(f));
    auto round = decode_i64(f->payload);
    if (!round) return wrap(round.error(), "rendezvous " + endpoint_ + ": stale round");
    if (Clock::now() >= deadline)
      return make_sys_error(ErrorKind::kTimeout,
                            "rendezvous " + endpoint_ + ": still no round to register in (round " +
                                std::to_string(req.round) + " refused; the server is at round " +
                                std::to_string(*round) + ") before the start time-out",
                            ETIMEDOUT);
    if (*round <= req.round) {  // ours has not begun there yet
      std::this_thread::sleep_for(std::min<Clock::duration>(pause, deadline - Clock::now()));
      pause = std::min(pause * 2, std::chrono::milliseconds(200));
      continue;
    }
    auto next = for_round(*round);
    if (!next) return next.error();
    req = std::move(*next);
  }
}

Result<PeerInfo> Client::get_peer(int rank, Clock::time_point deadline) {
  auto f = call(MsgType::kGetPeer, encode_i64(rank), deadline);
  if (!f) return f.error();
  if (f->type == MsgType::kNotFound) return make_error(ErrorKind::kRendezvous,
                                                       "rendezvous: rank " + std::to_string(rank) + " is unknown");
  if (f->type == MsgType::kStaleRound) {
    auto round = decode_i64(f->payload);
    return make_error(ErrorKind::kReset, "rendezvous: this worker's elastic round is over (the job is at round " +
                                             (round ? std::to_string(*round) : std::string("?")) + ")");
  }
  return decode_peer(f->payload);
}

Status Client::set(const std::string& key, const std::string& value, double timeout_s) {
  auto f = call(MsgType::kSet, encode_key_value(key, value), deadline_in(timeout_s));
  if (!f) return f.error();
  return {};
}

Result<std::string> Client::get(const std::string& key) {
  auto f = call(MsgType::kGet, encode_string(key), deadline_in(60));
  if (!f) return f.error();
  if (f->type == MsgType::kNotFound) return make_error(ErrorKind::kMissingKey, "key '" + key + "' not found");
  return decode_string(f->payload);
}

Status Client::wait(const std::vector<std::string>& keys, double timeout_s) {
  uint32_t ms = static_cast<uint32_t>(std::min(timeout_s, 4e6) * 1000);
  // The server answers at its own deadline; ours is a little later so its answer wins.
  auto f = call(MsgType::kWait, encode_wait(ms, keys), deadline_in(timeout_s + 5));
  if (!f) return f.error();
  if (f->type == MsgType::kTimeout) {
    auto missing = decode_keys(f->payload);
    std::string list;
    if (missing)
      for (const auto& k : *missing) list += (list.empty() ? "" : ", ") + k;
    return make_sys_error(ErrorKind::kTimeout,
                          "wait timed out after " + std::to_string(timeout_s) + " s for key(s): " + list, ETIMEDOUT);
  }
  return {};
}

Result<int64_t> Client::add(const std::string& key, int64_t delta) {
  auto f = call(MsgType::kAdd, encode_add(key, delta), deadline_in(60));
  if (!f) return f.error();
  return decode_i64(f->payload);
}

Status Client::barrier(const std::string& name, int n, double timeout_s) {
  uint32_t ms = static_cast<uint32_t>(std::min(timeout_s, 4e6) * 1000);
  auto f = call(MsgType::kBarrier, encode_barrier({name, n, ms}), deadline_in(timeout_s + 5));
  if (!f) return f.error();
  if (f->type == MsgType::kTimeout)
    return make_sys_error(ErrorKind::kTimeout,
                          "barrier '" + name + "' timed out after " + std::to_string(timeout_s) + " s", ETIMEDOUT);
  return {};
}

Status Client::report_fatal(const std::string& message) {
  auto f = call(MsgType::kFatal, encode_string(message), deadline_in(5));
  if (!f) return f.error();
  return {};
}

std::string Client::local_address() const { return socket_local_address(fd_.get()); }

void Client::shut_down() const {
  if (fd_.valid()) ::shutdown(fd_.get(), SHUT_RDWR);
}

}  // namespace hvdrun::rdv
