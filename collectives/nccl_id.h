// The NCCL unique id's trip through the job's store (hvdrun's rendezvous): rank 0 makes it
// and publishes it under rdv::kNcclUniqueIdKey (plus a generation suffix after the first),
// the others wait for it. Pure over the store and an id maker, so it is built (and tested,
// over transport/memory_store.h) without CUDA.
#pragma once

#include <functional>
#include <string>

#include "common/result.h"
#include "transport/store.h"

namespace hvdrun {

inline constexpr size_t kNcclIdBytes = 128;  // sizeof(ncclUniqueId)

// The key of the `generation`-th communicator of a job: the protocol's key for the first.
std::string nccl_id_key(int generation);

// Rank 0 calls make_id() and publishes its 128 bytes; every rank returns them. `client`
// (the rendezvous, as a store) may be null only for a job of one. Errors name the rank and
// the key.
Result<std::string> exchange_nccl_id(transport::Store* client, int rank, int size, int generation,
                                     const std::function<Result<std::string>()>& make_id, double timeout_s);

}  // namespace hvdrun
