// hvdrun --horovod: the key-value store Horovod 0.28.1's Gloo controller rendezvouses
// through (horovod/common/gloo/http_store.cc talks to it; horovodrun serves it with
// horovod/runner/http/http_server.py's RendezvousHandler). hvdrun serves it itself, so a
// program using a real Horovod runs unchanged under hvdrun. This file is the pure part: the
// store with its scope semantics and bounds, the request-to-answer mapping, and the check
// of who may connect. rendezvous/horovod_http.h serves it over HTTP (Boost.Beast).
//
// The protocol, as Horovod's server speaks it:
//   PUT    /SCOPE/KEY  (body: the value)   -> 200
//   GET    /SCOPE/KEY                      -> 200 with the value, 404 when there is none
//   DELETE /SCOPE/KEY                      -> 200; KEY is the rank that finished SCOPE:
//     - a scope of the job ("global", "local_<host>", "cross_<local rank>"): when every
//       rank of it has finished, the scope's values are dropped (a later hvd.init() starts
//       from an empty scope);
//     - any other scope (Horovod's process sets): KEY itself is dropped, and the scope with
//       its last key.
//   A path that is not exactly /SCOPE/KEY -> 400.
// Horovod's store has no authentication: hvdrun answers only the job's hosts (loopback,
// this machine's addresses and those the agents reported) and bounds what one client can
// store (docs/RENDEZVOUS.md).
#pragma once

#include <boost/asio/ip/address.hpp>
#include <cstddef>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/result.h"

namespace hvdrun::rdv {

struct HorovodStoreLimits {
  size_t max_target_bytes = 2048;        // the request path, /SCOPE/KEY
  size_t max_value_bytes = 8u << 20;     // one value (Gloo's is ~136 bytes per rank)
  size_t max_keys = 1u << 20;            // keys in all scopes together
  size_t max_total_bytes = 256u << 20;   // scopes, keys and values, each entry + kEntryOverhead
};

struct HttpAnswer {
  int status = 200;
  std::string body;
  bool operator==(const HttpAnswer&) const = default;
};

class HorovodStore {
 public:
  static constexpr size_t kEntryOverhead = 64;

  // `scope_sizes`: the job's scopes and how many ranks finish each (horovodrun's
  // RendezvousServer.init from its host assignment).
  explicit HorovodStore(std::map<std::string, int> scope_sizes, HorovodStoreLimits limits = {});

  // One request. `method` and `target` as on the request line, `body` the PUT's value.
  HttpAnswer handle(std::string_view method, std::string_view target, std::string body);

  Status put(const std::string& scope, const std::string& key, std::string value);
  std::optional<std::string> get(const std::string& scope, const std::string& key) const;
  void finish(const std::string& scope, const std::string& key);  // DELETE

  size_t keys() const { return keys_; }
  size_t bytes() const { return bytes_; }
  const HorovodStoreLimits& limits() const { return limits_; }

 private:
  void drop_scope(const std::string& scope);

  HorovodStoreLimits limits_;
  std::map<std::string, int> scope_sizes_;
  std::unordered_map<std::string, std::unordered_map<std::string, std::string>> scopes_;
  std::unordered_map<std::string, std::set<std::string>> finished_;
  size_t keys_ = 0, bytes_ = 0;
};

// "/SCOPE/KEY" -> {SCOPE, KEY}, as Horovod's server splits it (the bytes as sent, no
// decoding); an error for anything else ("/", "/a", "/a/b/c", "a/b").
Result<std::pair<std::string, std::string>> split_store_target(std::string_view target);

// The scopes of a job and their sizes, as horovodrun's server computes them: "global"
// (every rank), "local_<host>" (the ranks of that host), "cross_<local rank>" (the hosts
// with a rank of that local rank). `hosts[r]` is rank r's host (HOROVOD_HOSTNAME),
// `local_ranks[r]` its local rank.
std::map<std::string, int> horovod_scope_sizes(const std::vector<std::string>& hosts,
                                               const std::vector<int>& local_ranks);

// A request's Host header as the store accepts it: absent, or an IP address (IPv6 in
// brackets) with an optional port, as Horovod's client and urllib send it for
// HOROVOD_GLOO_RENDEZVOUS_ADDR. A host name is refused: a web page on a job host could
// otherwise reach the store through a name that resolves to it (DNS rebinding).
bool store_host_header_ok(std::string_view host);

// Who may connect: loopback (unless `loopback` is false), and the listed addresses (IPv4
// or IPv6, compared as addresses; an IPv4-mapped IPv6 peer is its IPv4 address).
class PeerAllowList {
 public:
  static Result<PeerAllowList> from(const std::vector<std::string>& addresses, bool loopback = true);
  bool allows(const boost::asio::ip::address& peer) const;
  bool allows(std::string_view peer) const;  // false for text that is no address
  size_t size() const { return allowed_.size(); }

 private:
  std::set<boost::asio::ip::address> allowed_;
  bool loopback_ = true;
};

}  // namespace hvdrun::rdv
