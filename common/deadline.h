// Seconds as a double (how tunables and options hold them) to steady-clock durations and
// deadlines.
#pragma once

#include <chrono>

namespace hvdrun {

using SteadyClock = std::chrono::steady_clock;

inline SteadyClock::duration seconds_to_duration(double s) {
  return std::chrono::duration_cast<SteadyClock::duration>(std::chrono::duration<double>(s));
}

inline SteadyClock::time_point deadline_in(double s) { return SteadyClock::now() + seconds_to_duration(s); }

// Seconds left until `deadline` (negative once it has passed).
inline double seconds_until(SteadyClock::time_point deadline) {
  return std::chrono::duration<double>(deadline - SteadyClock::now()).count();
}

}  // namespace hvdrun
