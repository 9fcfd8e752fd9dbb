// NCCL, loaded when the first device collective needs it, not when libhvdrun is loaded.
// A process that imports hvdrun before PyTorch must get PyTorch's own NCCL: had libhvdrun
// been linked against the toolkit's libnccl.so.2, that older library would already hold
// the soname when torch loads, and torch would fail on a symbol it lacks (ncclCommResume).
// So the NCCL a process has already loaded (torch's) is used when there is one; else
// HVDRUN_NCCL_LIBRARY; else libnccl.so.2 from the library path; else the one hvdrun was
// built against.
#pragma once

#include <nccl.h>

#include <string>

#include "common/result.h"

namespace hvdrun {

struct NcclLibrary {
  decltype(&::ncclGetErrorString) GetErrorString;
  decltype(&::ncclGetLastError) GetLastError;
  decltype(&::ncclGetVersion) GetVersion;
  decltype(&::ncclGetUniqueId) GetUniqueId;
  decltype(&::ncclCommInitRank) CommInitRank;
  decltype(&::ncclCommDestroy) CommDestroy;
  decltype(&::ncclCommAbort) CommAbort;
  decltype(&::ncclCommGetAsyncError) CommGetAsyncError;
  decltype(&::ncclAllReduce) AllReduce;
  decltype(&::ncclBroadcast) Broadcast;
  decltype(&::ncclAllGather) AllGather;
  decltype(&::ncclRedOpCreatePreMulSum) RedOpCreatePreMulSum;
  decltype(&::ncclRedOpDestroy) RedOpDestroy;
  decltype(&::ncclGroupStart) GroupStart;
  decltype(&::ncclGroupEnd) GroupEnd;
  decltype(&::ncclSend) Send;
  decltype(&::ncclRecv) Recv;
  int version = 0;   // ncclGetVersion's code of the loaded library
  std::string path;  // where it was loaded from (the already-loaded one's path, when so)
};

// Loads NCCL once per process (thread-safe) and resolves every function above; the same
// answer, library or error, every later call. The error names the library tried and the
// missing symbol: "NCCL /x/libnccl.so.2: no symbol ncclGetLastError (hvdrun needs NCCL
// 2.13 or newer)".
Result<const NcclLibrary*> nccl_library();

}  // namespace hvdrun
