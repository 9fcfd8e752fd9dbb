"""Allreduce of float32 torch tensors (sum, in place), timed the same way with either package:
  --impl horovod   real Horovod (horovod.torch, Gloo), run by horovodrun or hvdrun --horovod
  --impl hvdrun    hvdrun.torch, run by hvdrun
Sizes from LO to HI bytes, x4 each step. Rank 0 prints per size: bytes busbw_GBps time_us,
where a size's time is the slowest rank's mean over its iterations and busbw is
bytes / time * 2 (n - 1) / n (the ring's traffic per rank). Every buffer is written before
timing; each size runs a few untimed allreduces first.
Usage: torch_allreduce.py --impl horovod|hvdrun LO HI
"""

import argparse
import time

import torch

p = argparse.ArgumentParser()
p.add_argument("--impl", choices=["horovod", "hvdrun"], required=True)
p.add_argument("lo", type=int)
p.add_argument("hi", type=int)
args = p.parse_args()

if args.impl == "horovod":
    import horovod.torch as hvd
else:
    import hvdrun.torch as hvd

torch.set_num_threads(1)
hvd.init()
rank, n = hvd.rank(), hvd.size()
b = args.lo
while b <= args.hi:
    t = torch.zeros(b // 4, dtype=torch.float32)  # stays 0: no overflow to inf over the iterations
    iters = 5 if b >= 16 << 20 else 20 if b >= 1 << 20 else 200
    name = f"ar.{b}"
    for _ in range(3):
        hvd.allreduce_(t, op=hvd.Sum, name=name)
    hvd.allreduce(torch.zeros(1), name="sync")
    t0 = time.perf_counter()
    for _ in range(iters):
        hvd.allreduce_(t, op=hvd.Sum, name=name)
    dt = hvd.allreduce(torch.tensor([(time.perf_counter() - t0) / iters], dtype=torch.float64), op=hvd.Max,
                       name=f"dt.{b}").item()
    if rank == 0:
        print(f"{b} {b / dt / 1e9 * 2 * (n - 1) / n:.4f} {dt * 1e6:.1f}", flush=True)
    b *= 4
hvd.shutdown()
