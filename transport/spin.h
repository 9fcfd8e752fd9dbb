// The spin of a wait before it sleeps (transport/pair.cc's transfers, shm_group.cc's
// barrier), when the rank has no core of its own: each turn yields the core, and a yield
// that let another task run ends the spin. On a contended core a spinner sees its peer's
// progress only when the scheduler next gives it a turn, behind every busy task (its
// yields and polls have used up its share: milliseconds on a loaded host), whereas a
// sleeper is woken by that progress and runs at once (the scheduler favours a task waking
// from sleep). On a core of its own a yield returns in a microsecond and the spin goes on.
#pragma once

#include <sched.h>

#include <chrono>

namespace hvdrun::transport {

// A yield longer than this ran another task: the core is contended.
inline constexpr std::chrono::microseconds kContendedYield{50};

// Yields the core; true when another task ran meanwhile (the spin should end: sleep).
inline bool yield_lost_core() {
  const auto before = std::chrono::steady_clock::now();
  sched_yield();
  return std::chrono::steady_clock::now() - before > kContendedYield;
}

}  // namespace hvdrun::transport
