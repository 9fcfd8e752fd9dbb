#include "launcher/group_table.h"

#include <sys/mman.h>

namespace hvdrun {

GroupTable* GroupTable::create() {
  void* p = mmap(nullptr, sizeof(GroupTable), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? nullptr : static_cast<GroupTable*>(p);  // zeroed: every slot free
}

void GroupTable::destroy(GroupTable* t) {
  if (t) munmap(t, sizeof(GroupTable));
}

// Slots are taken from the front, a free one among those used before first (from the
// hint: a full table of groups that never end is not scanned on each add): only as many
// pages are touched as groups were alive at once. The hint is only a start: a race that
// leaves it past a free slot costs that slot until the next remove below it, not a group.
bool GroupTable::add(pid_t pgid) {
  const auto v = static_cast<int32_t>(pgid);
  const int used = __atomic_load_n(&used_, __ATOMIC_SEQ_CST);
  for (int i = __atomic_load_n(&hint_, __ATOMIC_RELAXED); i < used && i < kSlots; ++i) {
    int32_t expected = 0;
    if (__atomic_compare_exchange_n(&slots_[i], &expected, v, false, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED)) {
      __atomic_store_n(&hint_, i + 1, __ATOMIC_RELAXED);
      return true;
    }
  }
  int i = __atomic_fetch_add(&used_, 1, __ATOMIC_SEQ_CST);
  if (i >= kSlots) {
    __atomic_fetch_sub(&used_, 1, __ATOMIC_SEQ_CST);
    return false;
  }
  __atomic_store_n(&slots_[i], v, __ATOMIC_SEQ_CST);
  __atomic_store_n(&hint_, i + 1, __ATOMIC_RELAXED);
  return true;
}

bool GroupTable::remove(pid_t pgid) {
  for (int i = 0; i < __atomic_load_n(&used_, __ATOMIC_SEQ_CST) && i < kSlots; ++i) {
    int32_t expected = static_cast<int32_t>(pgid);
    if (__atomic_compare_exchange_n(&slots_[i], &expected, 0, false, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED)) {
      if (i < __atomic_load_n(&hint_, __ATOMIC_RELAXED)) __atomic_store_n(&hint_, i, __ATOMIC_RELAXED);
      return true;
    }
  }
  return false;
}

int GroupTable::list(int32_t* out, int max) const {
  int n = 0;
  for (int i = 0; i < __atomic_load_n(&used_, __ATOMIC_SEQ_CST) && i < kSlots && n < max; ++i)
    if (int32_t v = __atomic_load_n(&slots_[i], __ATOMIC_SEQ_CST); v > 0) out[n++] = v;
  return n;
}

}  // namespace hvdrun
