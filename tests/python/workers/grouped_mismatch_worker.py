"""Issue 30.5: ranks pass grouped_allreduce lists whose dtypes differ (rank 1's second tensor
is float64): every rank must get one clear HorovodInternalError naming the ranks and dtypes
at once, not a hang (a mixed list was split into one operation per dtype, named after it)."""
import torch

import hvdrun.torch as hvd

hvd.init()
r = hvd.rank()
xs = [torch.ones(3), torch.ones(2, dtype=torch.float64 if r == 1 else torch.float32)]
try:
    hvd.grouped_allreduce(xs, name="mixed", op=hvd.Sum)
    print("NO ERROR", flush=True)
except hvd.HorovodInternalError as e:
    print(f"CAUGHT {type(e).__name__}: {e}", flush=True)
# A list of several dtypes that agree runs, each tensor in its own dtype.
ys = hvd.grouped_allreduce([torch.ones(3), torch.ones(2, dtype=torch.float64), torch.ones(1, dtype=torch.int32)],
                           name="agree", op=hvd.Sum)
n = hvd.size()
ok = [y.dtype for y in ys] == [torch.float32, torch.float64, torch.int32] and all(bool((y == n).all()) for y in ys)
print("AGREE OK" if ok else f"AGREE WRONG {ys}", flush=True)
