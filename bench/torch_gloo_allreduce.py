# torch.distributed gloo all_reduce, float32 sum, timed like hvdrun-bench (run under hvdrun).
import os, sys, time
import torch
import torch.distributed as dist

dist.init_process_group("gloo", init_method="env://")
rank, n = dist.get_rank(), dist.get_world_size()
lo, hi = int(sys.argv[1]), int(sys.argv[2])
b = lo
while b <= hi:
    t = torch.zeros(b // 4, dtype=torch.float32)
    iters = 5 if b >= 16 << 20 else 20 if b >= 1 << 20 else 200
    for _ in range(3):
        dist.all_reduce(t)
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(t)
    dt = torch.tensor([(time.perf_counter() - t0) / iters], dtype=torch.float64)
    dist.all_reduce(dt, op=dist.ReduceOp.MAX)
    if rank == 0:
        print(f"{b} {b / dt.item() / 1e9 * 2 * (n - 1) / n:.4f} {dt.item() * 1e6:.1f}", flush=True)
    b *= 4
dist.destroy_process_group()
