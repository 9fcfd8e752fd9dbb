// The process groups a watchdog ends should hvdrun die, kept in memory that hvdrun (and
// every worker's child before its exec, which shares hvdrun's memory or a copy of this
// shared mapping) and the watchdog share. A child adds its own group and hvdrun removes
// a group that has ended with a plain atomic store: no system call, and above all no
// wake-up of the watchdog. Through the watchdog's pipe each worker woke it twice, and
// the first wake-up preempted the child on its way to exec while hvdrun waited for that
// exec (CLONE_VFORK): `hvdrun -np 32 true` took 1.2-1.3x 708645a's wall time. The
// watchdog reads the table once, when hvdrun is gone.
#pragma once

#include <sys/types.h>

#include <cstdint>

namespace hvdrun {

class GroupTable {
 public:
  static constexpr int kSlots = 1 << 16;
  // A zeroed, shared mapping that children forked later share; nullptr if mmap failed.
  static GroupTable* create();
  static void destroy(GroupTable* t);

  // Async-signal-safe (a child before its exec calls them). add: false when the table is
  // full (the caller then tells the watchdog through its pipe); remove: false when the
  // group is not in it.
  bool add(pid_t pgid);
  bool remove(pid_t pgid);
  // The groups in it now, written to out (at most max); their count.
  int list(int32_t* out, int max) const;

 private:
  GroupTable() = default;
  int32_t used_;  // slots [0, used_) were ever taken; those past it are untouched
  int32_t hint_;  // no free slot below it, as far as the last add and remove knew
  int32_t slots_[kSlots];
};

}  // namespace hvdrun
