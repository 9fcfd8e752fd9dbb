// Issue 25.6: the option structs of the worker runtime take their defaults from the
// tunables table (common/tunables.cc), so that an engine, ring or pair made in a test or a
// benchmark starts where the runtime starts (EngineOptions::fusion_bytes was 64 MiB against
// the table's 128 MiB, RingOptions::spin_us 50 against auto = 20000).
#include <gtest/gtest.h>

#include <string>

#include "collectives/engine/engine.h"
#include "collectives/gpu.h"
#include "collectives/hierarchy.h"
#include "collectives/ring.h"
#include "common/tunables.h"
#include "transport/pair.h"

namespace hvdrun {
namespace {

// The table's text, read here on its own (not through tunable_default).
double table(const char* env) {
  const Tunable* t = find_tunable(env);
  EXPECT_NE(t, nullptr) << env;
  if (!t) return -1;
  std::string v(t->default_value == "auto" ? t->range.auto_means : t->default_value);
  return std::stod(v);
}

TEST(TunableDefaults, EngineOptionsStartFromTheTable) {
  EngineOptions o;
  EXPECT_EQ(o.cycle_ms, table("HVDRUN_CYCLE_TIME"));
  EXPECT_EQ(o.fusion_bytes, table("HVDRUN_FUSION_THRESHOLD"));
  EXPECT_EQ(o.cache_capacity, table("HVDRUN_CACHE_CAPACITY"));
  EXPECT_EQ(o.stall_check_s, table("HVDRUN_STALL_CHECK_TIME_SECONDS"));
  EXPECT_EQ(o.stall_shutdown_s, table("HVDRUN_STALL_SHUTDOWN_TIME_SECONDS"));
}

TEST(TunableDefaults, RingAndPairOptionsStartFromTheTable) {
  RingOptions r;
  EXPECT_EQ(r.timeout_s, table("HVDRUN_TIMEOUT"));
  EXPECT_EQ(r.spin_us, table("HVDRUN_SPIN_US"));
  EXPECT_EQ(r.segment_bytes, table("HVDRUN_SEGMENT_BYTES"));
  transport::PairOptions p;
  EXPECT_EQ(p.buffer_bytes, table("HVDRUN_SOCKET_BUFFER"));
  EXPECT_EQ(GpuSetup{}.timeout_s, table("HVDRUN_TIMEOUT"));
  EXPECT_EQ(HierarchySetup{}.timeout_s, table("HVDRUN_TIMEOUT"));
}

}  // namespace
}  // namespace hvdrun
