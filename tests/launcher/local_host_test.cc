// Is a host name this machine? (launcher/local_host): against this machine's own names
// and addresses.
#include "launcher/local_host.h"

#include <unistd.h>

#include <gtest/gtest.h>
#include <string>

#include "common/net.h"

namespace hvdrun {
namespace {

TEST(LocalHost, LoopbackNamesAndAddresses) {
  for (const char* h : {"localhost", "localhost.localdomain", "::1", "0.0.0.0", "127.0.0.1", "127.1.2.3"})
    EXPECT_TRUE(is_local_host(h)) << h;
  for (const char* h : {"128.0.0.1", "126.255.255.255", "203.0.113.77", "no-such-host.invalid", "", "localhost2"})
    EXPECT_FALSE(is_local_host(h)) << h;
}

TEST(LocalHost, ThisMachinesNameShortNameAndInterfaceAddresses) {
  char name[256] = {};
  ASSERT_EQ(gethostname(name, sizeof name - 1), 0);
  std::string h(name);
  EXPECT_TRUE(is_local_host(h)) << h;
  if (h.find('.') != std::string::npos) {
    EXPECT_TRUE(is_local_host(h.substr(0, h.find('.'))));
  }
  EXPECT_FALSE(is_local_host(h + "-not"));
  auto addrs = interface_addresses();
  ASSERT_TRUE(addrs.ok());
  for (const auto& a : *addrs) EXPECT_TRUE(is_local_host(a.addr)) << a.iface << " " << a.addr;
}

}  // namespace
}  // namespace hvdrun
