#include "launcher/horovod_compat.h"
#include "launcher/exit_status.h"

#include <gtest/gtest.h>

namespace hvdrun {

TEST(HorovodCompat, ShimLiesBesideTheExecutablesPrefix) {
  EXPECT_EQ(horovod_compat_dir_for("/usr/local/bin/hvdrun"), "/usr/local/share/hvdrun/horovod-compat");
  EXPECT_EQ(horovod_compat_dir_for("/venv/bin/hvdrun"), "/venv/share/hvdrun/horovod-compat");
  EXPECT_EQ(horovod_compat_dir_for("/w/build/cli/hvdrun"), "/w/build/share/hvdrun/horovod-compat");
}

TEST(HorovodCompat, ProbesTheCommandsOwnPython) {
  EXPECT_EQ(probe_python({"python", "t.py"}), "python");
  EXPECT_EQ(probe_python({"/venv/bin/python3.11", "t.py"}), "/venv/bin/python3.11");
  EXPECT_EQ(probe_python({"sh", "-c", "python3 t.py"}), "python3");
  EXPECT_EQ(probe_python({}), "python3");
}

TEST(HorovodCompat, PrependToPath) {
  EXPECT_EQ(prepend_to_path("/s", ""), "/s");
  EXPECT_EQ(prepend_to_path("/s", "/a:/b"), "/s:/a:/b");
}

TEST(HorovodCompat, MissingShimIsAUsageError) {
  auto s = check_horovod_compat_dir("/nonexistent/share/hvdrun/horovod-compat");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(exit_code_for(s.error()), 2);
  EXPECT_NE(s.error().message.find("/nonexistent/share/hvdrun/horovod-compat"), std::string::npos);
}

}  // namespace hvdrun
