// hvdrun's rendezvous client as the collectives' Store (transport/store.h): the one place
// where the set-up of the ring, the hierarchy and the NCCL id meets the rendezvous protocol.
#pragma once

#include "rendezvous/client.h"
#include "transport/store.h"

namespace hvdrun {

// A rank's registration as the transport's address of it.
transport::PeerAddress peer_address(const rdv::PeerInfo& p);

class RendezvousStore : public transport::Store {
 public:
  explicit RendezvousStore(rdv::Client* client) : client_(client) {}

  // The client's calls, its errors unchanged but for the kind of a time-out (kTimeout).
  Status set(const std::string& key, const std::string& value) override;
  Result<std::string> get(const std::string& key) override;
  Status wait(const std::vector<std::string>& keys, double timeout_s) override;
  Status barrier(const std::string& name, int n, double timeout_s) override;
  Result<transport::PeerAddress> peer(int rank, std::chrono::steady_clock::time_point deadline) override;

 private:
  rdv::Client* client_;
};

}  // namespace hvdrun
