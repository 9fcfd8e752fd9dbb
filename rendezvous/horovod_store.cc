#include "rendezvous/horovod_store.h"

#include <algorithm>

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

bool ByteBudget::take(size_t n) {
  if (n > limit_ - used_) return false;
  used_ += n;
  return true;
}

Charge& Charge::operator=(Charge&& o) noexcept {
  if (this != &o) {
    release();
    budget_ = std::move(o.budget_);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

void Charge::release() {
  if (budget_) budget_->give(bytes_);
  budget_.reset();
  bytes_ = 0;
}

namespace {
constexpr std::string_view kProcessSetInfix = "_process_set_hash_";
// Gloo's values (third_party/gloo at Horovod 0.28.1, rendezvous/context.cc): "rank_R" holds
// the host name (at most 255 bytes), "R" one tcp::Address (136 bytes) per other rank.
constexpr size_t kHostValueBytes = 256, kAddressBytes = 256;
constexpr size_t kJobKeyBytes = 24;  // "rank_" and a rank
}  // namespace

HorovodReserve horovod_job_reserve(const std::map<std::string, int>& scope_sizes) {
  HorovodReserve r;
  for (const auto& [scope, size] : scope_sizes) {
    size_t n = static_cast<size_t>(std::max(size, 0));
    size_t name = scope.size() + kProcessSetInfix.size() + 16;  // the process set's, the longer
    size_t entries = 2 * n * (HorovodStore::kEntryOverhead + name + kJobKeyBytes);
    size_t values = n * kHostValueBytes + n * n * kAddressBytes;
    // The scope and its process set; each value once more while a PUT replaces it.
    r.keys += 2 * 2 * n;
    r.bytes += 2 * 2 * (entries + values);
  }
  return r;
}

HorovodStore::HorovodStore(std::map<std::string, int> scope_sizes, HorovodStoreLimits limits)
    : limits_(limits),
      scope_sizes_(std::move(scope_sizes)),
      reserve_size_(horovod_job_reserve(scope_sizes_)),
      general_(std::make_shared<ByteBudget>(limits.max_total_bytes)),
      reserve_(std::make_shared<ByteBudget>(reserve_size_.bytes)) {}

bool HorovodStore::job_scope(std::string_view scope) const {
  if (scope_sizes_.count(std::string(scope))) return true;
  // Horovod's process sets: SCOPE_process_set_hash_HEX (gloo_context.cc).
  size_t at = scope.rfind(kProcessSetInfix);
  if (at == std::string_view::npos) return false;
  std::string_view hex = scope.substr(at + kProcessSetInfix.size());
  return !hex.empty() && hex.size() <= 16 && hex.find_first_not_of("0123456789abcdef") == std::string_view::npos &&
         scope_sizes_.count(std::string(scope.substr(0, at)));
}

Result<std::pair<std::string, std::string>> split_store_target(std::string_view target) {
  // Horovod: paths = self.path.split('/'); _, scope, key = paths (three parts or nothing).
  if (target.empty() || target[0] != '/')
    return make_error(ErrorKind::kInvalidArgument, "path " + quoted(target) + ": expected /SCOPE/KEY");
  std::string_view rest = target.substr(1);
  size_t slash = rest.find('/');
  if (slash == std::string_view::npos || rest.find('/', slash + 1) != std::string_view::npos)
    return make_error(ErrorKind::kInvalidArgument,
                      "path " + quoted(target) + ": expected /SCOPE/KEY (exactly two parts)");
  return std::pair<std::string, std::string>(std::string(rest.substr(0, slash)), std::string(rest.substr(slash + 1)));
}

Admission HorovodStore::admit(std::string_view method, std::string_view target, size_t length) {
  Admission a;
  if (method != "GET" && method != "PUT" && method != "DELETE") {
    a.refusal = {405, "method " + quoted(method) + " not allowed: Horovod's store takes GET, PUT and DELETE\n", {}};
    return a;
  }
  if (target.size() > limits_.max_target_bytes) {
    a.refusal = {414, "path of " + std::to_string(target.size()) + " bytes exceeds the limit of " +
                          std::to_string(limits_.max_target_bytes) + " bytes\n", {}};
    return a;
  }
  auto sk = split_store_target(target);
  if (!sk) {
    a.refusal = {400, sk.error().message + "\n", {}};
    return a;
  }
  if (length > limits_.max_value_bytes) {
    a.refusal = {413, "value of " + std::to_string(length) + " bytes exceeds the limit of " +
                          std::to_string(limits_.max_value_bytes) + " bytes\n", {}};
    return a;
  }
  const auto& [scope, key] = *sk;
  size_t cost = length + (method == "PUT" ? scope.size() + key.size() + kEntryOverhead : 0);
  if (job_scope(scope) && reserve_->take(cost)) {
    a.charge = Charge(reserve_, cost);
  } else if (general_->take(cost)) {
    a.charge = Charge(general_, cost);
  } else {
    a.refusal = {507, printable(method, 16) + " " + quoted(target) + " with " + std::to_string(length) +
                          " bytes would hold more than the store's limit of " +
                          std::to_string(limits_.max_total_bytes) +
                          " bytes (values stored, being received and being sent)\n", {}};
  }
  return a;
}

Status HorovodStore::put(const std::string& scope, const std::string& key, std::string value) {
  Admission a = admit("PUT", "/" + scope + "/" + key, value.size());
  if (!a.ok()) {
    std::string why = a.refusal.text;
    while (!why.empty() && why.back() == '\n') why.pop_back();
    return make_error(ErrorKind::kInvalidArgument, why);
  }
  return store(scope, key, std::move(value), std::move(a.charge));
}

Status HorovodStore::store(const std::string& scope, const std::string& key, std::string value, Charge charge) {
  auto& entries = scopes_[scope];
  auto it = entries.find(key);
  if (it == entries.end()) {
    bool reserved = job_scope(scope) && reserve_keys_ < reserve_size_.keys;
    if (!reserved && general_keys_ >= limits_.max_keys) {
      if (entries.empty()) scopes_.erase(scope);
      return make_error(ErrorKind::kInvalidArgument, "setting " + quoted(scope + "/" + key) + " would hold more than " +
                        std::to_string(limits_.max_keys) + " keys, the store's limit");
    }
    ++(reserved ? reserve_keys_ : general_keys_);
    it = entries.emplace(key, Entry{nullptr, reserved}).first;
  }
  it->second.value = std::make_shared<const StoredValue>(StoredValue{std::move(value), std::move(charge)});
  return {};
}

Value HorovodStore::get(const std::string& scope, const std::string& key) const {
  auto sit = scopes_.find(scope);
  if (sit == scopes_.end()) return nullptr;
  auto kit = sit->second.find(key);
  if (kit == sit->second.end()) return nullptr;
  return kit->second.value;
}

void HorovodStore::erase(std::unordered_map<std::string, Entry>& entries,
                         std::unordered_map<std::string, Entry>::iterator it) {
  --(it->second.reserved ? reserve_keys_ : general_keys_);
  entries.erase(it);  // the value's bytes are given back once no answer sends it
}

void HorovodStore::drop_scope(const std::string& scope) {
  auto sit = scopes_.find(scope);
  if (sit == scopes_.end()) return;
  while (!sit->second.empty()) erase(sit->second, sit->second.begin());
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
  if (auto kit = sit->second.find(key); kit != sit->second.end()) erase(sit->second, kit);
  if (sit->second.empty()) scopes_.erase(sit);
}

HttpAnswer HorovodStore::handle(std::string_view method, std::string_view target, std::string body) {
  Admission a = admit(method, target, body.size());
  if (!a.ok()) return a.refusal;
  return handle(method, target, std::move(body), std::move(a.charge));
}

HttpAnswer HorovodStore::handle(std::string_view method, std::string_view target, std::string body, Charge charge) {
  auto sk = split_store_target(target);
  if (!sk) return {400, sk.error().message + "\n", {}};
  const auto& [scope, key] = *sk;
  if (method == "GET") {
    auto v = get(scope, key);
    if (!v) return {404, "", {}};  // Horovod's client polls for keys: a miss is normal, and silent
    return {200, "", std::move(v)};
  }
  if (method == "PUT") {
    if (auto st = store(scope, key, std::move(body), std::move(charge)); !st) return {507, st.error().message + "\n", {}};
    return {200, "", {}};
  }
  finish(scope, key);
  return {200, "", {}};
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
    if (ec) return make_error(ErrorKind::kInvalidArgument,
                              "allowed peer " + quoted(a) + ": not an IPv4 or IPv6 address");
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
