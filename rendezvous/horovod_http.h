// hvdrun --horovod: Horovod's Gloo rendezvous store (rendezvous/horovod_store.h) served
// over HTTP/1.1 with Boost.Beast, on the rendezvous server's Asio thread. One request per
// connection, as Horovod's client sends them (the answer says Connection: close).
//
// Hardened for a server without authentication:
//   - a peer not on the allow-list gets 403 and the connection is closed;
//   - a request's header must arrive within `header_timeout` of the connection, the whole
//     request within `request_timeout` (else 408); its header within 8 KiB (else 431), its
//     body within the value limit (else 413) and the store's room, taken before the body is
//     read (else 507; HorovodStore::admit);
//   - one address has at most `max_reading_per_peer` connections reading a request: a new
//     one closes its oldest; at `max_connections` open, a new connection closes the oldest
//     still reading of the address with most reading (the job's workers send their requests
//     at once: a client that connects and sends slowly does not keep them waiting); when
//     all are answering, more wait in the listen backlog;
//   - a duplicate Host header gets 400;
//   - malformed HTTP gets 400; nothing a client sends stops the server.
#pragma once

#include <boost/asio/io_context.hpp>
#include <functional>
#include <memory>
#include <string>

#include "common/result.h"
#include "rendezvous/horovod_store.h"

namespace hvdrun::rdv {

struct HorovodHttpOptions {
  std::string bind_address = "127.0.0.1";
  int port = 0;  // 0: chosen by the OS
  PeerAllowList allowed;
  std::map<std::string, int> scope_sizes;
  HorovodStoreLimits limits;
  double header_timeout = 3;    // seconds for a request's header to arrive
  double request_timeout = 10;  // seconds for a whole request to arrive
  size_t max_connections = 1024;
  size_t max_reading_per_peer = 128;  // connections of one address reading a request at once
};

class HorovodHttpServer {
 public:
  // (kind, line): a warning, rate-limited by kind by the caller.
  using Warn = std::function<void(const std::string& kind, const std::string& line)>;

  // Listens at once; serves from `io`'s thread. Destroy it on that thread or once `io`
  // no longer runs, before `io` itself.
  static Result<std::unique_ptr<HorovodHttpServer>> listen(boost::asio::io_context& io, HorovodHttpOptions options,
                                                           Warn warn);
  ~HorovodHttpServer();
  HorovodHttpServer(const HorovodHttpServer&) = delete;
  HorovodHttpServer& operator=(const HorovodHttpServer&) = delete;

  int port() const;
  int refused() const;  // connections refused (not a job host) or requests answered with an error

  struct State;

 private:
  explicit HorovodHttpServer(std::shared_ptr<State> state);
  std::shared_ptr<State> state_;
};

}  // namespace hvdrun::rdv
