#include "transport/memory_store.h"

#include <cerrno>

#include "common/deadline.h"

namespace hvdrun::transport {

namespace {

Error timed_out(const std::string& what, double timeout_s) {
  return make_sys_error(ErrorKind::kTimeout, what + " timed out after " + std::to_string(timeout_s) + " s", ETIMEDOUT);
}

}  // namespace

void MemoryStore::add_peer(const PeerAddress& address) {
  std::lock_guard<std::mutex> lk(mu_);
  peers_[address.rank] = address;
  changed_.notify_all();
}

Status MemoryStore::set(const std::string& key, const std::string& value) {
  std::lock_guard<std::mutex> lk(mu_);
  values_[key] = value;
  changed_.notify_all();
  return {};
}

Result<std::string> MemoryStore::get(const std::string& key) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = values_.find(key);
  if (it == values_.end()) return make_error(ErrorKind::kMissingKey, "key '" + key + "' not found");
  return it->second;
}

Status MemoryStore::wait(const std::vector<std::string>& keys, double timeout_s) {
  std::unique_lock<std::mutex> lk(mu_);
  auto all_set = [&] {
    for (auto& k : keys)
      if (!values_.count(k)) return false;
    return true;
  };
  if (!changed_.wait_until(lk, deadline_in(timeout_s), all_set)) return timed_out("wait", timeout_s);
  return {};
}

// Calls k*n+1 .. (k+1)*n of a name make its k-th round: each returns once its round is full.
Status MemoryStore::barrier(const std::string& name, int n, double timeout_s) {
  std::unique_lock<std::mutex> lk(mu_);
  const long mine = ++arrivals_[name], full = (mine + n - 1) / n * n;
  changed_.notify_all();
  if (!changed_.wait_until(lk, deadline_in(timeout_s), [&] { return arrivals_[name] >= full; }))
    return timed_out("barrier '" + name + "'", timeout_s);
  return {};
}

Result<PeerAddress> MemoryStore::peer(int rank, std::chrono::steady_clock::time_point deadline) {
  std::unique_lock<std::mutex> lk(mu_);
  if (!changed_.wait_until(lk, deadline, [&] { return peers_.count(rank) > 0; }))
    return make_sys_error(ErrorKind::kTimeout, "rank " + std::to_string(rank) + " has not registered", ETIMEDOUT);
  return peers_[rank];
}

}  // namespace hvdrun::transport
