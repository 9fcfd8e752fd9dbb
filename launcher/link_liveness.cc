#include "launcher/link_liveness.h"

#include <signal.h>

namespace hvdrun {

void LinkLiveness::relayed(int sig, Clock::time_point now) {
  if (sig == SIGSTOP) held_ = true;
  if (sig == SIGCONT && held_) {
    held_ = false;
    last_heard_ = now;
  }
}

}  // namespace hvdrun
