// The build without CUDA: every buffer is host memory, and asking for device collectives
// is an error that says why.
#include <gtest/gtest.h>

#include "collectives/gpu.h"

namespace hvdrun {
namespace {

TEST(GpuNone, EveryBufferIsHostMemoryAndDeviceCollectivesAreUnsupported) {
  EXPECT_STREQ(gpu_backend_name(), "none");
  int x = 0;
  auto m = memory_of(&x);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(*m, Memory::kHost);
  auto g = make_gpu_collectives(GpuSetup{});
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.error().kind, ErrorKind::kUnsupported);
  EXPECT_NE(g.error().message.find("built without CUDA"), std::string::npos) << g.error().message;
}

}  // namespace
}  // namespace hvdrun
