"""Ranks allreduce tensors of different shapes under one name: each must get one clear
HorovodInternalError (not a crash, not a hang)."""
import torch

import hvdrun.torch as hvd

hvd.init()
r = hvd.rank()
try:
    hvd.allreduce(torch.ones(3 + r), name="mismatched")
    print("NO ERROR", flush=True)
except hvd.HorovodInternalError as e:
    print(f"CAUGHT {type(e).__name__}: {e}", flush=True)
