// NCCL loaded at the first use, and the one a process already has preferred
// (collectives/nccl_library.h). Each case runs in a fresh process (a "threadsafe" death
// test re-executes this binary), since what is loaded is the process's state.
#include "collectives/nccl_library.h"

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace hvdrun {
namespace {

bool nccl_mapped() {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line))
    if (line.find("libnccl") != std::string::npos) return true;
  return false;
}

// Runs `body` in a fresh process: it exits 0 when its checks hold, else prints why.
template <typename F>
void in_fresh_process(F body) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        std::string why = body();
        std::fprintf(stderr, "%s\n", why.empty() ? "ok" : why.c_str());
        std::exit(why.empty() ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "ok");
}

TEST(NcclLibrary, LoadedAtFirstUseNotWithTheLibrary) {
  in_fresh_process([]() -> std::string {
    if (nccl_mapped()) return "libnccl is mapped before any device collective";
    auto n = nccl_library();
    if (!n) return "nccl_library: " + n.error().message;
    if (!nccl_mapped()) return "nccl_library succeeded but no libnccl is mapped";
    if ((*n)->version < 21300) return "version " + std::to_string((*n)->version);
    if ((*n)->path.find("libnccl") == std::string::npos) return "path " + (*n)->path;
    auto again = nccl_library();
    if (!again || *again != *n) return "a second call gave another answer";
    return "";
  });
}

TEST(NcclLibrary, TheNcclAlreadyInTheProcessWins) {
  // Another libnccl.so.2 (a link under another name, as torch's own copy is another file)
  // loaded first, as `import torch` does; HVDRUN_NCCL_LIBRARY points nowhere, so taking
  // anything but the loaded one fails.
  in_fresh_process([]() -> std::string {
    auto dir = std::filesystem::temp_directory_path() / ("hvdrun-nccl-" + std::to_string(getpid()));
    std::filesystem::create_directories(dir);
    auto link = dir / "libnccl.so.2";
    std::filesystem::create_symlink(HVDRUN_NCCL_BUILT_PATH, link);
    void* torch_nccl = dlopen(link.c_str(), RTLD_NOW | RTLD_GLOBAL);
    std::filesystem::remove_all(dir);
    if (!torch_nccl) return std::string("dlopen: ") + dlerror();
    setenv("HVDRUN_NCCL_LIBRARY", "/nonexistent/libnccl.so.2", 1);
    auto n = nccl_library();
    if (!n) return "nccl_library: " + n.error().message;
    if ((*n)->path != link.string()) return "loaded " + (*n)->path + ", not the process's " + link.string();
    return "";
  });
}

TEST(NcclLibrary, AConfiguredLibraryThatDoesNotOpenIsNamed) {
  in_fresh_process([]() -> std::string {
    setenv("HVDRUN_NCCL_LIBRARY", "/nonexistent/libnccl.so.2", 1);
    auto n = nccl_library();
    if (n) return "loaded " + (*n)->path;
    if (n.error().kind != ErrorKind::kNccl) return "kind " + std::to_string(static_cast<int>(n.error().kind));
    if (n.error().message.find("HVDRUN_NCCL_LIBRARY=/nonexistent/libnccl.so.2") == std::string::npos)
      return "message: " + n.error().message;
    if (nccl_mapped()) return "libnccl mapped after a failed load";
    return "";
  });
}

}  // namespace
}  // namespace hvdrun
