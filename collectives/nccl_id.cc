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
  const std::string key = nccl_id_key(generation);
  if (rank == 0) {
    auto id = make_id();
    if (!id) return id.error();
    if (id->size() != kNcclIdBytes)
      return make_error(ErrorKind::kInternal,
                        "NCCL unique id of " + std::to_string(id->size()) + " bytes, expected 128");
    if (size > 1) {
      if (!client) return make_error(ErrorKind::kRendezvous,
                                     "no rendezvous connection to publish the NCCL id on");
      if (auto s = client->set(key, *id); !s)
        return make_error(ErrorKind::kRendezvous, "publishing the NCCL id (" + key + "): " + s.error().message);
    }
    return id;
  }
  if (!client) return make_error(ErrorKind::kRendezvous, "no rendezvous connection to fetch the NCCL id from");
  if (auto s = client->wait({key}, timeout_s); !s)
    return with_kind(with_message(s.error(), "waiting for rank 0's NCCL id (" + key + "): " + s.error().message),
                     s.error().kind == ErrorKind::kTimeout ? ErrorKind::kTimeout : ErrorKind::kRendezvous);
  auto id = client->get(key);
  if (!id) return make_error(ErrorKind::kRendezvous, "fetching the NCCL id (" + key + "): " + id.error().message);
  if (id->size() != kNcclIdBytes)
    return make_error(ErrorKind::kRendezvous,
                      "NCCL id under " + key + " has " + std::to_string(id->size()) + " bytes, expected 128");
  return id;
}

}  // namespace hvdrun
