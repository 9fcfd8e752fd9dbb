// Ring broadcast: a pipelined chain root -> root+1 -> ... -> root-1; each rank forwards the
// bytes it has received as they arrive.
#include <cstring>

#include "collectives/dtype.h"
#include "collectives/ring.h"
#include "collectives/ring_header.h"

namespace hvdrun {

Status Ring::broadcast(void* buf, size_t count, hvd_dtype_t dtype, int root) {
  if (auto s = check_agreement(Header{seq_++, count, root, kBroadcast, static_cast<uint8_t>(dtype), 0, 0}); !s)
    return s;
  if (size_ == 1 || count == 0) return {};
  size_t bytes = count * dtype_size(dtype);
  char* p = static_cast<char*>(buf);
  bool is_root = rank_ == root, is_last = mod(rank_ + 1, size_) == root;
  if (is_root) return step(p, bytes, nullptr, 0, false);
  if (is_last) return step(nullptr, 0, p, bytes, false);
  return step(nullptr, bytes, p, bytes, /*forward=*/true);
}

}  // namespace hvdrun
