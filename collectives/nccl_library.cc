#include "collectives/nccl_library.h"

#include <dlfcn.h>
#include <link.h>

#include <mutex>

#include "common/tunables.h"

namespace hvdrun {
namespace {

constexpr const char* kSoname = "libnccl.so.2";

std::string loaded_path(void* handle) {
  link_map* map = nullptr;
  if (dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map && map->l_name && *map->l_name) return map->l_name;
  return kSoname;
}

std::string dl_error() {
  const char* e = dlerror();
  return e ? e : "unknown error";
}

// The NCCL already in the process (PyTorch's), or the first of the configured, the
// searched and the built-against library that opens.
Result<void*> open_nccl(std::string* tried) {
  if (void* h = dlopen(kSoname, RTLD_NOW | RTLD_NOLOAD)) return h;
  std::string configured = tunable_string("HVDRUN_NCCL_LIBRARY");
  if (!configured.empty()) {
    if (void* h = dlopen(configured.c_str(), RTLD_NOW | RTLD_LOCAL)) return h;
    return make_error(ErrorKind::kNccl, "HVDRUN_NCCL_LIBRARY=" + configured + ": " + dl_error());
  }
  if (void* h = dlopen(kSoname, RTLD_NOW | RTLD_LOCAL)) return h;
  *tried = std::string(kSoname) + ": " + dl_error();
  if (void* h = dlopen(HVDRUN_NCCL_BUILT_PATH, RTLD_NOW | RTLD_LOCAL)) return h;
  return make_error(ErrorKind::kNccl, "cannot load NCCL (" + *tried + "; " + HVDRUN_NCCL_BUILT_PATH + ": " +
                                          dl_error() + "); set HVDRUN_NCCL_LIBRARY to a libnccl.so.2");
}

template <typename F>
bool resolve(void* h, const char* name, F* out, std::string* missing) {
  *out = reinterpret_cast<F>(dlsym(h, name));
  if (!*out && missing->empty()) *missing = name;
  return *out != nullptr;
}

Result<NcclLibrary> load() {
  std::string tried;
  auto h = open_nccl(&tried);
  if (!h) return h.error();
  NcclLibrary n;
  n.path = loaded_path(*h);
  std::string missing;
  resolve(*h, "ncclGetErrorString", &n.GetErrorString, &missing);
  resolve(*h, "ncclGetLastError", &n.GetLastError, &missing);
  resolve(*h, "ncclGetVersion", &n.GetVersion, &missing);
  resolve(*h, "ncclGetUniqueId", &n.GetUniqueId, &missing);
  resolve(*h, "ncclCommInitRank", &n.CommInitRank, &missing);
  resolve(*h, "ncclCommDestroy", &n.CommDestroy, &missing);
  resolve(*h, "ncclCommAbort", &n.CommAbort, &missing);
  resolve(*h, "ncclCommGetAsyncError", &n.CommGetAsyncError, &missing);
  resolve(*h, "ncclAllReduce", &n.AllReduce, &missing);
  resolve(*h, "ncclBroadcast", &n.Broadcast, &missing);
  resolve(*h, "ncclAllGather", &n.AllGather, &missing);
  resolve(*h, "ncclRedOpCreatePreMulSum", &n.RedOpCreatePreMulSum, &missing);
  resolve(*h, "ncclRedOpDestroy", &n.RedOpDestroy, &missing);
  resolve(*h, "ncclGroupStart", &n.GroupStart, &missing);
  resolve(*h, "ncclGroupEnd", &n.GroupEnd, &missing);
  resolve(*h, "ncclSend", &n.Send, &missing);
  resolve(*h, "ncclRecv", &n.Recv, &missing);
  // The handle stays open for the process's life: NCCL's own threads may outlive any user.
  if (!missing.empty())
    return make_error(ErrorKind::kNccl, "NCCL " + n.path + ": no symbol " + missing + " (hvdrun needs NCCL 2.13 or newer)");
  if (ncclResult_t r = n.GetVersion(&n.version); r != ncclSuccess)
    return make_error(ErrorKind::kNccl, "NCCL " + n.path + ": ncclGetVersion: " + n.GetErrorString(r));
  return n;
}

}  // namespace

Result<const NcclLibrary*> nccl_library() {
  static std::once_flag once;
  static Result<NcclLibrary> loaded = make_error(ErrorKind::kNccl, "NCCL not loaded");
  std::call_once(once, [] { loaded = load(); });
  if (!loaded) return loaded.error();
  return &*loaded;
}

}  // namespace hvdrun
