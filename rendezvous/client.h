// The worker's side of the rendezvous: blocking calls, each with a deadline, over one
// authenticated TCP connection. Used by libhvdrun's hvd_init and its collectives.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "common/result.h"
#include "common/unique_fd.h"
#include "rendezvous/protocol.h"

namespace hvdrun::rdv {

using Clock = std::chrono::steady_clock;

// Connects to addr:port, retrying refused or unreachable connections with exponential
// backoff and jitter until `deadline`; then authenticates both ways. A server that fails
// its proof, or refuses ours, is an error at once (no retry).
class Client {
 public:
  static Result<Client> connect(const std::string& addr, int port, const std::string& secret,
                                Clock::time_point deadline);

  Client(Client&&) = default;
  Client& operator=(Client&&) = default;

  // Registers and waits (until `deadline`) for every rank to register.
  Result<Registered> register_rank(const RegisterRequest& req, Clock::time_point deadline);
  // Elastic: registers for req.round. A server whose round is another answers kStaleRound
  // with its round: `for_round` gives the request for that round (this slot's numbers there)
  // or an error (the slot was removed) that ends the loop; a round not begun on the server
  // yet is asked again after a pause. Until `deadline`.
  using RoundRequest = std::function<Result<RegisterRequest>(int64_t round)>;
  Result<Registered> register_in_round(RegisterRequest req, const RoundRequest& for_round,
                                       Clock::time_point deadline);
  // Rank `rank`'s address. Elastic: once this connection's round is over, kReset (the
  // server's table is another round's).
  Result<PeerInfo> get_peer(int rank, Clock::time_point deadline);

  // `timeout_s`: how long the server may take to answer (a report on the way out of a
  // failed collective waits less than the store's users do).
  Status set(const std::string& key, const std::string& value, double timeout_s = 60);
  Result<std::string> get(const std::string& key);  // kMissingKey when absent
  Status wait(const std::vector<std::string>& keys, double timeout_s);
  Result<int64_t> add(const std::string& key, int64_t delta);
  // Returns when `n` participants have called it with the same name (one round trip).
  Status barrier(const std::string& name, int n, double timeout_s);
  Status report_fatal(const std::string& message);

  // This side's address of the connection (what the server sees us as).
  std::string local_address() const;
  // Ends the connection for a call blocked on it in another thread (which then fails):
  // the socket is shut down, not closed. The client is of no further use.
  void shut_down() const;

 private:
  Client() = default;
  Status send(MsgType type, const std::string& payload, Clock::time_point deadline);
  Result<Frame> recv(Clock::time_point deadline, size_t max_frame = kMaxFrame);
  // The connection failed under a send or a receive: a rendezvous error, its errno kept.
  Error lost(const Error& e) const;
  Result<Frame> call(MsgType type, const std::string& payload, Clock::time_point deadline);
  // The answer to a kRegister, other than kStaleRound.
  Result<Registered> registered(Result<Frame> f) const;

  UniqueFd fd_;
  std::string endpoint_;
};

}  // namespace hvdrun::rdv
