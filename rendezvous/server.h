// The rendezvous server that runs inside hvdrun (Boost.Asio, one thread). It authenticates
// every connection, registers ranks, answers with ring neighbours once the job is complete,
// serves a job-scoped key-value store (set/get/wait/add), and reports a worker's fatal
// error or a start time-out to the launcher through callbacks (called on its thread).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/result.h"
#include "rendezvous/horovod_store.h"

namespace hvdrun::rdv {

struct ExpectedRank {
  std::string host;
  int local_rank = 0;
};

// hvdrun --horovod: Horovod's Gloo rendezvous store, served over HTTP on another port of
// the same address, on the server's thread (rendezvous/horovod_http.h).
struct HorovodServing {
  bool enabled = false;
  std::vector<std::string> allowed_peers;  // besides loopback: the job's hosts' addresses
  bool allow_loopback = true;              // false only in tests (to see a refusal on loopback)
  HorovodStoreLimits limits;
  double header_timeout = 3;    // seconds for a request's header to arrive
  double request_timeout = 10;  // seconds for a whole request to arrive
  size_t max_connections = 1024;
  size_t max_reading_per_peer = 128;  // connections of one address reading a request at once
};

struct ServerOptions {
  std::string bind_address = "127.0.0.1";
  int port = 0;                      // 0: chosen by the OS
  std::string secret;                // raw bytes
  std::vector<ExpectedRank> ranks;   // index = rank; size = job size
  double handshake_timeout = 10;     // seconds for a new connection to authenticate
  double start_timeout = 30;         // seconds for every rank to register; <= 0: none
  HorovodServing horovod;
};

struct ServerCallbacks {
  std::function<void(int rank, const std::string& message)> on_fatal;
  std::function<void(const std::string& message)> on_start_timeout;
  // A rank set a key under "hvdrun/stall/" (libhvdrun's stall report): the value is the
  // report, one line per missing rank.
  std::function<void(int rank, const std::string& key, const std::string& report)> on_stall;
  // A registered rank's connection ended before the rank said it was done (hvd_shutdown
  // sets kFinalizedKeyPrefix + its rank, rendezvous/protocol.h): it left the job, by exiting or crashing.
  std::function<void(int rank)> on_rank_left;
  // A rank set kSilentKeyPrefix + its rank: it made no progress with rank `peer`.
  std::function<void(int rank, int peer)> on_silent;
  // A rank set kLostKeyPrefix + its rank: it failed on rank `peer`'s closed connection.
  std::function<void(int rank, int peer)> on_lost;
  // A rank of the current elastic round set kElasticCommitKeyPrefix + its round to the
  // commit the round starts from.
  std::function<void(int round, long long commit)> on_elastic_commit;
  // Rank `rank` registered in elastic round `round` (called before any rank is told that
  // the round's registration is complete).
  std::function<void(int round, int rank)> on_elastic_registered;
};


class Server {
 public:
  static Result<std::unique_ptr<Server>> start(ServerOptions options, ServerCallbacks callbacks);
  ~Server();  // stops the thread and closes every connection
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  const std::string& address() const;
  int port() const;
  int horovod_port() const;     // the Horovod store's port; 0 when not served
  int horovod_refused() const;  // its refused connections and error answers; thread-safe
  int registered() const;       // thread-safe
  int rejected() const;         // connections refused (auth, garbage, limits); thread-safe
  int waiting() const;          // waits and barriers not answered yet; thread-safe
  // Arms the start timer (call once the workers have been started).
  void begin_start_timer();

  // Elastic (docs/ELASTIC.md): round `round` (1, 2, ...: only grows) begins with `ranks`
  // (index = rank). The registration table is cleared and sized for it; a registration
  // still waiting for an earlier round, and any later kRegister whose round is not this
  // one, is answered kStaleRound (the connection stays open); a kRegister with no round is
  // refused. The callbacks' ranks are this round's from now on (a connection registered
  // in an earlier round reports nothing more). Thread-safe; done on the server's thread
  // before any request that arrives after it returns.
  void begin_round(int round, std::vector<ExpectedRank> ranks);
  // Writes key = value in the store and wakes its waiters, as a worker's set does. In the
  // order called (with begin_round). Thread-safe; never call it from a callback (it waits
  // for the server's thread). An error names the store's bound it would pass.
  Status set(const std::string& key, const std::string& value);
  int round() const;  // the current elastic round; 0 outside an elastic job; thread-safe

  struct Impl;

 private:
  explicit Server(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// "rank 5 (host node2, local rank 1) did not reach the rendezvous at ADDR:PORT within 30 s",
// one line per missing rank (the first `max_listed`, then a count).
std::string start_timeout_message(const std::vector<int>& missing, const std::vector<ExpectedRank>& ranks,
                                  const std::string& endpoint, double timeout, size_t max_listed = 8);

}  // namespace hvdrun::rdv
