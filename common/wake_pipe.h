// A self-pipe that wakes a poll() loop from other threads: the loop polls fd() for POLLIN
// and drains it; wake() never blocks (a full pipe already wakes the loop). Both ends are
// non-blocking and close-on-exec. Used by the agent loop, the elastic driver and ElasticAgents.
#pragma once

#include "common/result.h"
#include "common/unique_fd.h"

namespace hvdrun {

class WakePipe {
 public:
  // kSystem (with its errno) when no pipe can be made (the descriptors ran out).
  static Result<WakePipe> open();
  int fd() const { return rd_.get(); }  // the end to poll
  void wake() const;                     // thread-safe
  void drain() const;                    // what wake() wrote, after POLLIN

 private:
  UniqueFd rd_, wr_;
};

}  // namespace hvdrun
