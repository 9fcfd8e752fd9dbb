#include "rendezvous/horovod_store.h"

#include "common/strings.h"

namespace hvdrun::rdv {
namespace {

std::string quoted(std::string_view s) { return "'" + printable(s, 64) + "'"; }

boost::asio::ip::address normalized(const boost::asio::ip::address& a) {
  if (a.is_v6() && a.to_v6().is_v4_mapped())
    return boost::asio::ip::make_address_v4(boost::asio::ip::v4_mapped, a.to_v6());
  return a;
}

}  // namespace

HorovodStore::HorovodStore(std::map<std::string, int> scope_sizes, HorovodStoreLimits limits)
    : limits_(limits), scope_sizes_(std::move(scope_sizes)) {}

Result<std::pair<std::string, std::string>> split_store_target(std::string_view target) {
  // Horovod: paths = self.path.split('/'); _, scope, key = paths (three parts or nothing).
  if (target.empty() || target[0] != '/')
    return make_error("path " + quoted(target) + ": expected /SCOPE/KEY");
  std::string_view rest = target.substr(1);
  size_t slash = rest.find('/');
  if (slash == std::string_view::npos || rest.find('/', slash + 1) != std::string_view::npos)
    return make_error("path " + quoted(target) + ": expected /SCOPE/KEY (exactly two parts)");
  return std::pair<std::string, std::string>(std::string(rest.substr(0, slash)), std::string(rest.substr(slash + 1)));
}

Status HorovodStore::put(const std::string& scope, const std::string& key, std::string value) {
  if (value.size() > limits_.max_value_bytes)
    return make_error("value of " + std::to_string(value.size()) + " bytes for " + quoted(scope + "/" + key) +
                      " exceeds the limit of " + std::to_string(limits_.max_value_bytes) + " bytes");
  auto sit = scopes_.find(scope);
  const std::string* old = nullptr;
  if (sit != scopes_.end())
    if (auto kit = sit->second.find(key); kit != sit->second.end()) old = &kit->second;
  size_t entry = scope.size() + key.size() + kEntryOverhead;
  size_t now = bytes_ - (old ? entry + old->size() : 0) + entry + value.size();
  if (!old && keys_ + 1 > limits_.max_keys)
    return make_error("setting " + quoted(scope + "/" + key) + " would hold more than " +
                      std::to_string(limits_.max_keys) + " keys, the store's limit");
  if (now > limits_.max_total_bytes)
    return make_error("setting " + quoted(scope + "/" + key) + " would grow the store to " + std::to_string(now) +
                      " bytes, over its limit of " + std::to_string(limits_.max_total_bytes) + " bytes");
  bytes_ = now;
  if (!old) ++keys_;
  scopes_[scope][key] = std::move(value);
  return {};
}

std::optional<std::string> HorovodStore::get(const std::string& scope, const std::string& key) const {
  auto sit = scopes_.find(scope);
  if (sit == scopes_.end()) return std::nullopt;
  auto kit = sit->second.find(key);
  if (kit == sit->second.end()) return std::nullopt;
  return kit->second;
}

void HorovodStore::drop_scope(const std::string& scope) {
  auto sit = scopes_.find(scope);
  if (sit == scopes_.end()) return;
  for (const auto& [k, v] : sit->second) {
    bytes_ -= scope.size() + k.size() + kEntryOverhead + v.size();
    --keys_;
  }
  scopes_.erase(sit);
}

void HorovodStore::finish(const std::string& scope, const std::string& key) {
  if (auto size = scope_sizes_.find(scope); size != scope_sizes_.end()) {
    // A scope of the job: KEY (a rank) has finished it. A repeated DELETE (Horovod's
    // client retries) counts once. Horovod's server also forgets the other scopes'
    // finished ranks here, so a scope finished later may keep its values; hvdrun keeps
    // each scope's own count.
    auto& done = finished_[scope];
    done.insert(key);
    if (static_cast<int>(done.size()) >= size->second) {
      drop_scope(scope);
      finished_.erase(scope);
    }
    return;
  }
  auto sit = scopes_.find(scope);
  if (sit == scopes_.end()) return;
  if (auto kit = sit->second.find(key); kit != sit->second.end()) {
    bytes_ -= scope.size() + key.size() + kEntryOverhead + kit->second.size();
    --keys_;
    sit->second.erase(kit);
  }
  if (sit->second.empty()) scopes_.erase(sit);
}

HttpAnswer HorovodStore::handle(std::string_view method, std::string_view target, std::string body) {
  if (method != "GET" && method != "PUT" && method != "DELETE")
    return {405, "method " + quoted(method) + " not allowed: Horovod's store takes GET, PUT and DELETE\n"};
  if (target.size() > limits_.max_target_bytes)
    return {414, "path of " + std::to_string(target.size()) + " bytes exceeds the limit of " +
                     std::to_string(limits_.max_target_bytes) + " bytes\n"};
  auto sk = split_store_target(target);
  if (!sk) return {400, sk.error().message + "\n"};
  const auto& [scope, key] = *sk;
  if (method == "GET") {
    auto v = get(scope, key);
    if (!v) return {404, ""};  // Horovod's client polls for keys: a miss is normal, and silent
    return {200, std::move(*v)};
  }
  if (method == "PUT") {
    if (body.size() > limits_.max_value_bytes)
      return {413, "value of " + std::to_string(body.size()) + " bytes exceeds the limit of " +
                       std::to_string(limits_.max_value_bytes) + " bytes\n"};
    if (auto st = put(scope, key, std::move(body)); !st) return {507, st.error().message + "\n"};
    return {200, ""};
  }
  finish(scope, key);
  return {200, ""};
}

std::map<std::string, int> horovod_scope_sizes(const std::vector<std::string>& hosts,
                                               const std::vector<int>& local_ranks) {
  std::map<std::string, int> sizes;
  sizes["global"] = static_cast<int>(hosts.size());
  std::map<int, std::set<std::string>> hosts_of_local_rank;
  for (size_t r = 0; r < hosts.size(); ++r) {
    sizes["local_" + hosts[r]]++;
    if (r < local_ranks.size()) hosts_of_local_rank[local_ranks[r]].insert(hosts[r]);
  }
  for (const auto& [lr, hs] : hosts_of_local_rank) sizes["cross_" + std::to_string(lr)] = static_cast<int>(hs.size());
  return sizes;
}

bool store_host_header_ok(std::string_view host) {
  if (host.empty()) return true;
  std::string addr;
  std::string_view port;
  if (host[0] == '[') {
    size_t close = host.find(']');
    if (close == std::string_view::npos) return false;
    addr = std::string(host.substr(1, close - 1));
    std::string_view rest = host.substr(close + 1);
    if (!rest.empty()) {
      if (rest[0] != ':') return false;
      port = rest.substr(1);
    }
  } else {
    size_t colon = host.find(':');
    if (colon != std::string_view::npos && host.find(':', colon + 1) != std::string_view::npos)
      return false;  // a bare IPv6 address is not a Host (RFC 7230 wants brackets)
    addr = std::string(host.substr(0, colon));
    if (colon != std::string_view::npos) {
      port = host.substr(colon + 1);
      if (port.empty()) return false;
    }
    if (addr.find_first_not_of("0123456789.") != std::string::npos) return false;  // no names
  }
  if (port.size() > 5 || port.find_first_not_of("0123456789") != std::string_view::npos) return false;
  boost::system::error_code ec;
  (void)boost::asio::ip::make_address(addr, ec);
  return !ec;
}

Result<PeerAllowList> PeerAllowList::from(const std::vector<std::string>& addresses, bool loopback) {
  PeerAllowList out;
  out.loopback_ = loopback;
  for (const auto& a : addresses) {
    boost::system::error_code ec;
    // An interface's IPv6 address may carry its zone ("fe80::1%eth0"): compared without it.
    std::string text = a.substr(0, a.find('%'));
    auto addr = boost::asio::ip::make_address(text, ec);
    if (ec) return make_error("allowed peer " + quoted(a) + ": not an IPv4 or IPv6 address");
    out.allowed_.insert(normalized(addr));
  }
  return out;
}

bool PeerAllowList::allows(const boost::asio::ip::address& peer_in) const {
  auto peer = normalized(peer_in);
  if (loopback_ && peer.is_loopback()) return true;
  if (peer.is_v6()) {  // the zone does not take part
    auto v6 = peer.to_v6();
    v6.scope_id(0);
    peer = v6;
  }
  return allowed_.count(peer) > 0;
}

bool PeerAllowList::allows(std::string_view peer) const {
  boost::system::error_code ec;
  auto addr = boost::asio::ip::make_address(std::string(peer), ec);
  return !ec && allows(addr);
}

}  // namespace hvdrun::rdv
