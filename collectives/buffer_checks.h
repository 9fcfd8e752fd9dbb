// Whether a call's buffers can be what its counts say, checked before anything is
// submitted: every byte count (count x dtype size, rows x row_elems, x size() for what
// every rank sends, sums of splits) computed without wrapping, and every buffer ending below
// the top of the address space; and a call's output apart from its inputs unless it is
// exactly one of them (in place). A failure is kInvalidArgument naming the value
// and the most that would fit, or the two buffers that overlap.
//
// What a rank may send is bounded so that whatever every rank sends together still fits
// (an allgatherv's output, what an alltoall delivers to one rank): rows x row_elems x
// size() must fit, so that the engine's sums over ranks cannot wrap either.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/result.h"
#include "hvdrun/hvdrun.h"

namespace hvdrun {

// The top of a process's address space: the most a Linux kernel gives on this architecture
// (x86-64 with 5-level paging 2^56, arm64 with 52-bit addresses 2^52; elsewhere the top of
// the pointer range). No buffer ends above it.
uintptr_t address_space_top();

// n tensors: counts[i] elements (of dtypes[i], or all of dtype) from sends[i] into recvs[i];
// recvs[i] may be sends[i].
Status check_allreduce_buffers(const char* what, int n, const void* const* sends, void* const* recvs,
                               const size_t* counts, hvd_dtype_t dtype, const hvd_dtype_t* dtypes = nullptr);
Status check_broadcast_buffer(const char* what, const void* buf, size_t count, hvd_dtype_t dtype);
// recv: size() x rows x row_elems elements, or null when the handle keeps the output. send
// may be recv (in place) or this rank's block of it.
Status check_allgather_buffers(const char* what, const void* send, const void* recv, size_t rows, size_t row_elems,
                               hvd_dtype_t dtype, int rank, int size);
// splits: size() entries adding up to rows, or null (equal blocks).
Status check_alltoall_buffers(const char* what, const void* send, size_t rows, size_t row_elems,
                              const size_t* splits, hvd_dtype_t dtype, int size);
// recv holds this rank's `mine` rows; it may be send (in place).
Status check_reducescatter_buffers(const char* what, const void* send, const void* recv, size_t rows, size_t mine,
                                   size_t row_elems, hvd_dtype_t dtype);

}  // namespace hvdrun
