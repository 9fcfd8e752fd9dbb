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
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/result.h"

namespace hvdrun::rdv {

struct HorovodStoreLimits {
  size_t max_target_bytes = 2048;        // the request path, /SCOPE/KEY
  size_t max_value_bytes = 8u << 20;     // one value (Gloo's is ~136 bytes per rank)
  size_t max_keys = 1u << 20;            // keys in all scopes together
  // Bytes held in all: stored entries, request bodies being received, and values that an
  // answer still sends after the store dropped or replaced them (each entry + kEntryOverhead).
  size_t max_total_bytes = 256u << 20;
};

// Bytes counted against a bound. One thread (the server's).
class ByteBudget {
 public:
  explicit ByteBudget(size_t limit) : limit_(limit) {}
  bool take(size_t n);
  void give(size_t n) { used_ -= n; }
  size_t used() const { return used_; }
  size_t limit() const { return limit_; }

 private:
  size_t limit_, used_ = 0;
};

// Bytes taken from a budget, given back when the charge is destroyed. Move-only.
class Charge {
 public:
  Charge() = default;
  Charge(std::shared_ptr<ByteBudget> budget, size_t bytes) : budget_(std::move(budget)), bytes_(bytes) {}
  Charge(Charge&& o) noexcept : budget_(std::move(o.budget_)), bytes_(std::exchange(o.bytes_, 0)) {}
  Charge& operator=(Charge&& o) noexcept;
  ~Charge() { release(); }
  size_t bytes() const { return bytes_; }
  const ByteBudget* budget() const { return budget_.get(); }

 private:
  void release();
  std::shared_ptr<ByteBudget> budget_;
  size_t bytes_ = 0;
};

// A stored value with the bytes it holds, shared by the store and every answer still
// sending it (an answer references the value, it does not copy it): its bytes stay counted
// until the last of them lets it go.
struct StoredValue {
  std::string bytes;
  Charge charge;
};
using Value = std::shared_ptr<const StoredValue>;

struct HttpAnswer {
  int status = 200;
  std::string text;  // an error's reason (one line), else empty
  Value value;       // a GET's value (shared with the store)
  std::string_view body() const { return value ? std::string_view(value->bytes) : std::string_view(text); }
  bool operator==(const HttpAnswer& o) const { return status == o.status && body() == o.body(); }
};

// A request admitted before its body is read: room taken for the body, or the refusal.
struct Admission {
  HttpAnswer refusal{0, "", {}};  // status 0: admitted
  Charge charge;
  bool ok() const { return refusal.status == 0; }
};

// Room kept for the job's own rendezvous apart from the bounds: the job's scopes (and
// Horovod's process-set scopes made from them) first take from it, so that filling the
// store elsewhere never refuses the job's next hvd.init().
struct HorovodReserve {
  size_t keys = 0, bytes = 0;
};

class HorovodStore {
 public:
  static constexpr size_t kEntryOverhead = 64;

  // `scope_sizes`: the job's scopes and how many ranks finish each (horovodrun's
  // RendezvousServer.init from its host assignment).
  explicit HorovodStore(std::map<std::string, int> scope_sizes, HorovodStoreLimits limits = {});

  // A request, once its header is read: the method, the path and a body of `length`
  // bytes (taken from the budget here, before the body is read) are admitted, or refused
  // with 405, 414, 400, 413 or 507.
  Admission admit(std::string_view method, std::string_view target, size_t length);
  // An admitted request with its body; `charge` is admit's.
  HttpAnswer handle(std::string_view method, std::string_view target, std::string body, Charge charge);
  // admit, then handle.
  HttpAnswer handle(std::string_view method, std::string_view target, std::string body);

  Status put(const std::string& scope, const std::string& key, std::string value);
  Value get(const std::string& scope, const std::string& key) const;  // null: none
  void finish(const std::string& scope, const std::string& key);       // DELETE

  size_t keys() const { return general_keys_ + reserve_keys_; }
  // Bytes held: stored entries, admitted bodies, values still being sent.
  size_t bytes() const { return general_->used() + reserve_->used(); }
  const HorovodStoreLimits& limits() const { return limits_; }
  const HorovodReserve& reserve() const { return reserve_size_; }
  bool job_scope(std::string_view scope) const;

 private:
  struct Entry {
    Value value;
    bool reserved = false;  // counted in the job's reserve of keys
  };
  Status store(const std::string& scope, const std::string& key, std::string value, Charge charge);
  void erase(std::unordered_map<std::string, Entry>& scope, std::unordered_map<std::string, Entry>::iterator it);
  void drop_scope(const std::string& scope);

  HorovodStoreLimits limits_;
  std::map<std::string, int> scope_sizes_;
  HorovodReserve reserve_size_;
  std::shared_ptr<ByteBudget> general_, reserve_;
  std::unordered_map<std::string, std::unordered_map<std::string, Entry>> scopes_;
  std::unordered_map<std::string, std::set<std::string>> finished_;
  size_t general_keys_ = 0, reserve_keys_ = 0;
};

// The room the job's rendezvous needs (HorovodReserve): for each job scope of n ranks and
// the process-set scope Horovod makes from it, n keys "rank_R" (the host name) and n keys
// "R" (n - 1 Gloo addresses of 136 bytes), with a margin.
HorovodReserve horovod_job_reserve(const std::map<std::string, int>& scope_sizes);

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
