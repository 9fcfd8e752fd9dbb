"""One elastic training loop for scripts/bench-elastic.sh, under three launchers.

  --impl horovod   Horovod Elastic's API (`import horovod.torch`): real Horovod 0.28.1
                   under `horovodrun --gloo`, or hvdrun.torch under `hvdrun --horovod-compat`
                   (the same file, unchanged).
  --impl ddp       torch.distributed (gloo) under torchrun: no elastic API; after a failure
                   or a membership change torchrun restarts every worker, which resumes from
                   the newest checkpoint.

Every rank appends `start <time> <pid> <host> <rank> <size>` when a round begins, rank 0
appends `step <time> <size> <step>` after every step, to --record (one shared file; the
script reads the times, all from this machine's clock). With --commit-cost N, rank 0
appends `commit <seconds per call>`: the mean of N `state.commit()` calls with nothing
changed after N/4 untimed ones (Horovod: save + check_host_updates()), and `check <seconds
per call>`: the same of N `state.check_host_updates()` calls alone, then the loop ends.
"""
from __future__ import annotations

import argparse
import os
import socket
import time

import torch

p = argparse.ArgumentParser()
p.add_argument("--impl", choices=("horovod", "ddp"), required=True)
p.add_argument("--record", required=True)
p.add_argument("--steps", type=int, default=400)
p.add_argument("--step-time", type=float, default=0.02, help="seconds of compute per step (sleep)")
p.add_argument("--commit-cost", type=int, default=0)
p.add_argument("--checkpoint", default="", help="ddp: the checkpoint file")
args = p.parse_args()
torch.set_num_threads(1)


def log(line: str) -> None:
    with open(args.record, "a") as f:
        f.write(line + "\n")


def host() -> str:
    return os.environ.get("HOROVOD_HOSTNAME") or socket.gethostname()


def model_and_data():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 2))
    data, target = torch.randn(32, 64), torch.randint(0, 2, (32,))
    return model, data, target


def step(model, opt, data, target) -> None:
    opt.zero_grad()
    torch.nn.functional.cross_entropy(model(data), target).backward()
    opt.step()
    if args.step_time > 0:
        time.sleep(args.step_time)


def run_horovod() -> None:
    import horovod.torch as hvd

    hvd.init()
    model, data, target = model_and_data()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                                   named_parameters=model.named_parameters())
    state = hvd.elastic.TorchState(model, opt, step=0)

    @hvd.elastic.run
    def train(state) -> None:
        log(f"start {time.time():.6f} {os.getpid()} {host()} {hvd.rank()} {hvd.size()}")
        if args.commit_cost:
            for _ in range(max(1, args.commit_cost // 4)):  # untimed: the first calls after the start
                state.commit()
            t0 = time.perf_counter()
            for _ in range(args.commit_cost):
                state.commit()
            if hvd.rank() == 0:
                log(f"commit {(time.perf_counter() - t0) / args.commit_cost:.9f}")
            t0 = time.perf_counter()
            for _ in range(args.commit_cost):
                state.check_host_updates()
            if hvd.rank() == 0:
                log(f"check {(time.perf_counter() - t0) / args.commit_cost:.9f}")
            return
        while state.step < args.steps:
            step(model, opt, data, target)
            state.step += 1
            if hvd.rank() == 0:
                log(f"step {time.time():.6f} {hvd.size()} {state.step}")
            state.commit()

    train(state)


def run_ddp() -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank, size = dist.get_rank(), dist.get_world_size()
    log(f"start {time.time():.6f} {os.getpid()} {host()} {rank} {size}")
    model, data, target = model_and_data()
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    first = 0
    if args.checkpoint and os.path.exists(args.checkpoint):
        ck = torch.load(args.checkpoint)
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        first = ck["step"]
    for s in range(first, args.steps):
        step(ddp, opt, data, target)
        if rank == 0:
            log(f"step {time.time():.6f} {size} {s + 1}")
            if args.checkpoint:  # every step, as the Horovod loop commits every step
                tmp = args.checkpoint + ".tmp"
                torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": s + 1}, tmp)
                os.replace(tmp, args.checkpoint)
    dist.destroy_process_group()


if __name__ == "__main__":
    run_horovod() if args.impl == "horovod" else run_ddp()
