// A round's device communicators (collectives/round_device.cc) over a fake backend on the
// CPU: the round's end aborts them and wakes a collective blocked in them, nothing of the
// ended round is used or made again, and the next round makes new ones. (NCCL's own abort:
// tests/integration/gpu_launch_test.cc, on a GPU, through scripts/gpu-check.sh.)
#include "collectives/round_device.h"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>

namespace hvdrun {
namespace {

// allreduce blocks until abort() (at most 60 s, then kTimeout), as an NCCL collective whose
// peer is gone does; it returns the abort's error.
class FakeDevice : public GpuCollectives {
 public:
  explicit FakeDevice(int* destroyed) : destroyed_(destroyed) {}
  ~FakeDevice() override { ++*destroyed_; }
  Status allreduce(const void*, void*, size_t, hvd_dtype_t, hvd_op_t) override {
    std::unique_lock<std::mutex> lk(mu_);
    ++entered_;
    cv_.notify_all();
    if (!cv_.wait_for(lk, std::chrono::seconds(60), [&] { return aborts_ > 0; }))
      return make_error(ErrorKind::kTimeout, "fake: never aborted");
    return *why_;
  }
  Status broadcast(void*, size_t, hvd_dtype_t, int) override { return {}; }
  Status allgather(const void*, void*, size_t, hvd_dtype_t) override { return {}; }
  void abort(const Error& why) override {
    std::lock_guard<std::mutex> lk(mu_);
    ++aborts_;
    why_ = why;
    cv_.notify_all();
  }
  bool wait_entered() {
    std::unique_lock<std::mutex> lk(mu_);
    return cv_.wait_for(lk, std::chrono::seconds(60), [&] { return entered_ > 0; });
  }
  int aborts() {
    std::lock_guard<std::mutex> lk(mu_);
    return aborts_;
  }

 private:
  int* destroyed_;
  std::mutex mu_;
  std::condition_variable cv_;
  int entered_ = 0, aborts_ = 0;
  std::optional<Error> why_;
};

struct Maker {
  int made = 0, destroyed = 0;
  FakeDevice* last = nullptr;
  std::function<void()> during;  // runs while the device is being made
  RoundDevice::Make make() {
    return [this]() -> Result<std::unique_ptr<GpuCollectives>> {
      ++made;
      if (during) during();
      auto d = std::make_unique<FakeDevice>(&destroyed);
      last = d.get();
      return std::unique_ptr<GpuCollectives>(std::move(d));
    };
  }
};

TEST(RoundDevice, TheRoundsEndAbortsABlockedCollectiveAndTheNextRoundMakesNewCommunicators) {
  RoundDevice rd;
  Maker m;
  auto g = rd.get(m.make());
  ASSERT_TRUE(g);
  ASSERT_EQ(*rd.get(m.make()), *g);  // made once per round
  EXPECT_EQ(m.made, 1);
  Status blocked = make_error(ErrorKind::kInternal, "not returned");
  float x = 1, y = 0;
  std::thread t([&] { blocked = (*g)->allreduce(&x, &y, 1, HVD_FLOAT32, HVD_OP_SUM); });
  ASSERT_TRUE(m.last->wait_entered());
  rd.end(make_error(ErrorKind::kReset, "round 1 is over"));
  t.join();
  ASSERT_FALSE(blocked);
  EXPECT_EQ(blocked.error().kind, ErrorKind::kReset);  // not kTimeout: the abort woke it
  rd.end(make_error(ErrorKind::kReset, "again"));
  EXPECT_EQ(m.last->aborts(), 1);
  auto after = rd.get(m.make());  // the ended round's communicators are never used again
  ASSERT_FALSE(after);
  EXPECT_EQ(after.error().kind, ErrorKind::kReset);
  EXPECT_EQ(m.made, 1);
  rd.reset();  // hvd_shutdown
  EXPECT_EQ(m.destroyed, 1);
  auto next = rd.get(m.make());
  ASSERT_TRUE(next);
  EXPECT_EQ(m.made, 2);
  EXPECT_EQ(m.last->aborts(), 0);
}

TEST(RoundDevice, CommunicatorsMadeWhileTheRoundEndsAreAbortedAndNotHandedOut) {
  RoundDevice rd;
  Maker m;
  m.during = [&] { rd.end(make_error(ErrorKind::kReset, "round 2 is over")); };
  auto g = rd.get(m.make());
  ASSERT_FALSE(g);
  EXPECT_EQ(g.error().kind, ErrorKind::kReset);
  ASSERT_NE(m.last, nullptr);
  EXPECT_EQ(m.last->aborts(), 1);
  rd.reset();
  EXPECT_EQ(m.destroyed, 1);
}

}  // namespace
}  // namespace hvdrun
