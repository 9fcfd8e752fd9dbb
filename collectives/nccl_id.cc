#include "collectives/nccl_id.h"

#include <cerrno>

#include "hvdrun/hvdrun.h"
#include "rendezvous/protocol.h"

namespace hvdrun {

std::string nccl_id_key(int generation) {
  std::string key(rdv::kNcclUniqueIdKey);
  return generation == 0 ? key : key + "/" + std::to_string(generation);
}

Result<std::string> exchange_nccl_id(transport::Store* client, int rank, int size, int generation,
                                     const std::function<Result<std::string>()>& make_id, double timeout_s) {
  const std::string who = "rank " + std::to_string(rank) + ": ";
  const std::string key = nccl_id_key(generation);
  if (rank == 0) {
    auto id = make_id();
    if (!id) return id.error();
    if (id->size() != kNcclIdBytes)
      return Error{who + "NCCL unique id of " + std::to_string(id->size()) + " bytes, expected 128", HVD_ERR_INTERNAL};
    if (size > 1) {
      if (!client) return Error{who + "no rendezvous connection to publish the NCCL id on", HVD_ERR_RENDEZVOUS};
      if (auto s = client->set(key, *id); !s)
        return Error{who + "publishing the NCCL id (" + key + "): " + s.error().message, HVD_ERR_RENDEZVOUS};
    }
    return id;
  }
  if (!client) return Error{who + "no rendezvous connection to fetch the NCCL id from", HVD_ERR_RENDEZVOUS};
  if (auto s = client->wait({key}, timeout_s); !s)
    return Error{who + "waiting for rank 0's NCCL id (" + key + "): " + s.error().message,
                 s.error().code == ETIMEDOUT ? HVD_ERR_TIMEOUT : HVD_ERR_RENDEZVOUS};
  auto id = client->get(key);
  if (!id) return Error{who + "fetching the NCCL id (" + key + "): " + id.error().message, HVD_ERR_RENDEZVOUS};
  if (id->size() != kNcclIdBytes)
    return Error{who + "NCCL id under " + key + " has " + std::to_string(id->size()) + " bytes, expected 128",
                 HVD_ERR_RENDEZVOUS};
  return id;
}

}  // namespace hvdrun
