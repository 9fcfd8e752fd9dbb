#include "collectives/rendezvous_store.h"

#include <cerrno>

namespace hvdrun {

namespace {

// The client reports a time-out by its errno; the Store's contract adds the kind.
Status timeout_kind(Status s) {
  if (!s && s.error().code == ETIMEDOUT) return with_kind(s.error(), ErrorKind::kTimeout);
  return s;
}

}  // namespace

transport::PeerAddress peer_address(const rdv::PeerInfo& p) { return {p.rank, p.host, p.addr, p.port}; }

Status RendezvousStore::set(const std::string& key, const std::string& value) { return client_->set(key, value); }

Result<std::string> RendezvousStore::get(const std::string& key) { return client_->get(key); }

Status RendezvousStore::wait(const std::vector<std::string>& keys, double timeout_s) {
  return timeout_kind(client_->wait(keys, timeout_s));
}

Status RendezvousStore::barrier(const std::string& name, int n, double timeout_s) {
  return timeout_kind(client_->barrier(name, n, timeout_s));
}

Result<transport::PeerAddress> RendezvousStore::peer(int rank, std::chrono::steady_clock::time_point deadline) {
  auto p = client_->get_peer(rank, deadline);
  if (!p) return p.error();
  return peer_address(*p);
}

}  // namespace hvdrun
