#include "collectives/rendezvous_store.h"

namespace hvdrun {

transport::PeerAddress peer_address(const rdv::PeerInfo& p) { return {p.rank, p.host, p.addr, p.port}; }

Status RendezvousStore::set(const std::string& key, const std::string& value) { return client_->set(key, value); }

Result<std::string> RendezvousStore::get(const std::string& key) { return client_->get(key); }

Status RendezvousStore::wait(const std::vector<std::string>& keys, double timeout_s) {
  return client_->wait(keys, timeout_s);  // a time-out is kTimeout already
}

Status RendezvousStore::barrier(const std::string& name, int n, double timeout_s) {
  return client_->barrier(name, n, timeout_s);
}

Result<transport::PeerAddress> RendezvousStore::peer(int rank, std::chrono::steady_clock::time_point deadline) {
  auto p = client_->get_peer(rank, deadline);
  if (!p) return p.error();
  return peer_address(*p);
}

}  // namespace hvdrun
