// The tensor shapes a caller gives with hvd_next_call: checked against the counts of the
// call they describe, then carried in its spec (Spec::shapes), so that the negotiation
// compares shapes as Horovod's controller does, not only element counts.
#pragma once

#include <cstdint>
#include <vector>

#include "collectives/engine/spec.h"
#include "common/result.h"

namespace hvdrun {

// hvd_next_call's arrays as Spec::shapes encodes them (each tensor's number of dimensions,
// then its dimensions). kInvalidArgument: a negative count or dimension, more than 32
// dimensions, null arrays with tensors to describe.
Result<std::vector<int64_t>> encode_shapes(int ntensors, const int* ndims, const long long* dims);

// Puts `shapes` (encoded) in *spec after checking that they describe its tensors: one per
// tensor; allreduce and broadcast: the dimensions multiply to the count; the row-shaped
// kinds and reducescatter: at least one dimension, the first is the rows and the others
// multiply to the elements per row (but a 0-d tensor of allgather or alltoall passes as one
// row of one element: the negotiation refuses it on every rank). Barrier and join take none.
Status apply_shapes(const char* what, std::vector<int64_t> shapes, Spec* spec);

}  // namespace hvdrun
