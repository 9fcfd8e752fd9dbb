"""Elastic recovery side by side (scripts/bench-elastic.sh runs it): hvdrun against
`horovodrun --gloo` elastic and torchrun (c10d rendezvous, --max-restarts), the same
training loop (bench/elastic_train.py), on this machine with two "hosts": `localhost` and
`127.0.0.1` (both are this machine to Horovod and hvdrun, which start them without ssh;
torchrun gets one agent per host).

Per tool and round, three measurements from the loop's log (one clock, this machine's):
  lost    SIGKILL of every rank of host 127.0.0.1 (torchrun: its agent too) -> the first
          completed step at the new size; and whether the survivors kept their PIDs.
  added   127.0.0.1 written into the discovery file (torchrun: its agent started) -> the
          first completed step at the larger size.
  commit  state.commit() with nothing changed, seconds per call (Horovod's API only).
Prints one line per measurement and a table of medians with ratios against hvdrun.
"""
from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

REPO = Path(__file__).resolve().parents[1]
TRAIN = REPO / "bench" / "elastic_train.py"
A, B = "localhost", "127.0.0.1"


class Run:
    """One launch of the training loop, its log, and the processes behind it."""

    def __init__(self, tool: "Tool", work: Path, hosts: List[Tuple[str, int]], steps: int, extra: List[str]):
        self.tool, self.work, self.log = tool, work, work / "log"
        self.log.write_text("")
        self.hosts_file = work / "hosts"
        self.set_hosts(hosts)
        self.procs: List[subprocess.Popen] = []
        self.train = [tool.python, str(TRAIN), "--record", str(self.log), "--steps", str(steps)] + extra
        self.out = open(work / "out", "w")

    def set_hosts(self, hosts: List[Tuple[str, int]]) -> None:
        tmp = self.hosts_file.with_suffix(".tmp")
        tmp.write_text("".join(f"{h}:{n}\n" for h, n in hosts))
        os.replace(tmp, self.hosts_file)

    def lines(self, kind: str) -> List[List[str]]:
        return [l.split() for l in self.log.read_text().splitlines() if l.startswith(kind + " ")]

    def wait_for(self, pred, deadline: float, what: str):
        end = time.time() + deadline
        while time.time() < end:
            got = pred()
            if got is not None:
                return got
            if self.procs and all(p.poll() is not None for p in self.procs):
                raise RuntimeError(f"{self.tool.name}: the job ended while waiting for {what}\n{self.tail()}")
            time.sleep(0.005)
        raise RuntimeError(f"{self.tool.name}: no {what} within {deadline} s\n{self.tail()}")

    def first_step_after(self, t0: float, size: int) -> Optional[float]:
        for _, t, s, _n in self.lines("step"):
            if float(t) > t0 and int(s) == size:
                return float(t)
        return None

    def steps_at(self, size: int) -> int:
        return sum(1 for _, _t, s, _n in self.lines("step") if int(s) == size)

    def ranks_of(self, host: str) -> List[int]:
        """PIDs of the newest round's ranks on `host` (start lines: time pid host rank size)."""
        starts = self.lines("start")
        if not starts:
            return []
        size = int(starts[-1][5])
        newest: Dict[int, Tuple[int, str]] = {}
        for _, _t, pid, h, rank, _s in starts:
            newest[int(rank)] = (int(pid), h)
        return [pid for rank, (pid, h) in newest.items() if h == host and rank < size]

    def tail(self) -> str:
        self.out.flush()
        return (self.work / "out").read_text()[-3000:]

    def finish(self, deadline: float) -> None:
        """Waits up to `deadline` s for the launch to end, then kills what is left of it."""
        end = time.time() + deadline
        for p in self.procs:
            try:
                p.wait(max(0.1, end - time.time()))
            except subprocess.TimeoutExpired:
                pass
        # SIGTERM first: horovodrun then removes its multiprocessing semaphores from /dev/shm.
        for sig, grace in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 10.0)):
            left = [p for p in self.procs if p.poll() is None]
            for p in left:
                try:
                    os.killpg(p.pid, sig)
                except ProcessLookupError:
                    pass
            for p in left:
                try:
                    p.wait(grace)
                except subprocess.TimeoutExpired:
                    pass
        self.out.close()


class Tool:
    name = ""

    def __init__(self, python: str):
        self.python = python

    def start(self, run: Run, np: int, min_np: int, max_np: int, hosts: List[Tuple[str, int]]) -> None:
        raise NotImplementedError

    def lose(self, run: Run, host: str) -> List[int]:
        pids = run.ranks_of(host)
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        return pids


class HorovodLike(Tool):
    def __init__(self, name: str, python: str, launcher: List[str]):
        super().__init__(python)
        self.name, self.launcher = name, launcher

    def start(self, run: Run, np: int, min_np: int, max_np: int, hosts: List[Tuple[str, int]]) -> None:
        disc = run.work / "discover.sh"
        disc.write_text(f"#!/bin/sh\ncat {run.hosts_file}\n")
        disc.chmod(0o755)
        cmd = self.launcher + ["-np", str(np), "--min-np", str(min_np), "--max-np", str(max_np),
                               "--host-discovery-script", str(disc)] + run.train + ["--impl", "horovod"]
        run.procs.append(subprocess.Popen(cmd, stdout=run.out, stderr=subprocess.STDOUT, start_new_session=True))


class Torchrun(Tool):
    name = "torchrun"

    def __init__(self, python: str, port: int):
        super().__init__(python)
        self.port = port
        self.agents: Dict[str, subprocess.Popen] = {}

    def agent(self, run: Run, host: str, slots: int, max_nodes: int) -> None:
        env = dict(os.environ, HOROVOD_HOSTNAME=host)
        cmd = [self.python, "-m", "torch.distributed.run", f"--nnodes=1:{max_nodes}", f"--nproc_per_node={slots}",
               "--rdzv_backend=c10d", f"--rdzv_endpoint=127.0.0.1:{self.port}", f"--rdzv_id=bench{self.port}",
               "--max_restarts=5", "--monitor_interval=0.1", "--rdzv_conf=last_call_timeout=1",
               # Debian's torch 1.13 on Python 3.11 reads the default "0" of both as None
               # and fails (3.11 iterates only single-bit flags): 1 and 2 work on every version.
               "--redirects=1", "--tee=2", f"--log_dir={run.work / ('torchrun-' + host)}"] + \
            run.train[1:] + ["--impl", "ddp", "--checkpoint", str(run.work / "ckpt")]
        p = subprocess.Popen(cmd, stdout=run.out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        self.agents[host] = p
        run.procs.append(p)

    def start(self, run: Run, np: int, min_np: int, max_np: int, hosts: List[Tuple[str, int]]) -> None:
        self.port += 1
        self.agents = {}
        for i, (h, n) in enumerate(hosts):
            self.agent(run, h, n, 2)
            if i == 0:  # the first host's agent holds the c10d store: the host that is never lost
                run.wait_for(self.store_up, 60, "torchrun's c10d store")

    def store_up(self) -> Optional[bool]:
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
            return True
        except OSError:
            return None

    def lose(self, run: Run, host: str) -> List[int]:
        pids = run.ranks_of(host)
        os.killpg(self.agents[host].pid, signal.SIGKILL)  # the host is gone: its agent with it
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return pids


def measure_lost(tool: Tool, warm: int, deadline: float) -> Tuple[float, bool]:
    with tempfile.TemporaryDirectory(prefix="hvd-elastic-") as d:
        run = Run(tool, Path(d), [(A, 2), (B, 2)], 10**6, [])
        tool.start(run, 4, 2, 4, [(A, 2), (B, 2)])
        try:
            run.wait_for(lambda: True if run.steps_at(4) >= warm else None, deadline, f"{warm} steps at size 4")
            survivors = set(run.ranks_of(A))
            t_kill = time.time()
            tool.lose(run, B)
            run.set_hosts([(A, 2)])
            t = run.wait_for(lambda: run.first_step_after(t_kill, 2), deadline, "a step at size 2 after the kill")
            kept = set(run.ranks_of(A)) == survivors
            return t - t_kill, kept
        finally:
            run.finish(0)


def measure_added(tool: Tool, warm: int, deadline: float) -> float:
    with tempfile.TemporaryDirectory(prefix="hvd-elastic-") as d:
        run = Run(tool, Path(d), [(A, 2)], 10**6, [])
        tool.start(run, 2, 2, 4, [(A, 2)])
        try:
            run.wait_for(lambda: True if run.steps_at(2) >= warm else None, deadline, f"{warm} steps at size 2")
            t_add = time.time()
            run.set_hosts([(A, 2), (B, 2)])
            if isinstance(tool, Torchrun):
                tool.agent(run, B, 2, 2)
            t = run.wait_for(lambda: run.first_step_after(t_add, 4), deadline, "a step at size 4 after the add")
            return t - t_add
        finally:
            run.finish(0)


def measure_commit(tool: Tool, calls: int, deadline: float) -> float:
    with tempfile.TemporaryDirectory(prefix="hvd-elastic-") as d:
        run = Run(tool, Path(d), [(A, 2), (B, 2)], 10**6, ["--commit-cost", str(calls)])
        tool.start(run, 4, 2, 4, [(A, 2), (B, 2)])
        try:
            got = run.wait_for(lambda: (run.lines("commit") or [None])[0], deadline, "the commit figure")
            return float(got[1])
        finally:
            run.finish(deadline)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hvdrun", required=True)
    ap.add_argument("--horovodrun", required=True)
    ap.add_argument("--python", required=True, help="the interpreter with torch and Horovod (the peer venv)")
    ap.add_argument("--hvdrun-python", default="/usr/bin/python3",
                    help="hvdrun's interpreter: the same torch without Horovod, so that `import horovod.torch` "
                         "is hvdrun's shim (with a real Horovod importable, --horovod-compat runs that)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warm", type=int, default=30, help="steps before the kill or the add")
    ap.add_argument("--commit-calls", type=int, default=200)
    ap.add_argument("--deadline", type=float, default=120)
    ap.add_argument("--tools", default="hvdrun,horovodrun,torchrun")
    ap.add_argument("--parts", default="lost,added,commit")
    a = ap.parse_args()
    tools: List[Tool] = []
    for name in a.tools.split(","):
        if name == "hvdrun":
            tools.append(HorovodLike("hvdrun", a.hvdrun_python, [a.hvdrun, "--horovod-compat"]))
        elif name == "horovodrun":
            tools.append(HorovodLike("horovodrun", a.python, [a.horovodrun, "--gloo", "--network-interface", "lo"]))
        elif name == "torchrun":
            tools.append(Torchrun(a.python, 29500 + os.getpid() % 1000))
    res: Dict[Tuple[str, str], List[float]] = {}
    failed: Dict[Tuple[str, str], int] = {}
    parts = a.parts.split(",")
    for r in range(a.rounds):
        for tool in tools:  # the tools alternate within each round
            for part in parts:
                if part == "commit" and isinstance(tool, Torchrun):
                    continue  # (no elastic API: nothing to commit)
                try:
                    if part == "lost":
                        secs, kept = measure_lost(tool, a.warm, a.deadline)
                        line = f"{secs:.3f} s to the first step at size 2; survivors kept their PIDs: {kept}"
                    elif part == "added":
                        secs = measure_added(tool, a.warm, a.deadline)
                        line = f"{secs:.3f} s to the first step at size 4"
                    else:
                        secs = measure_commit(tool, a.commit_calls, a.deadline)
                        line = f"{secs * 1e6:.1f} us per call"
                except RuntimeError as e:  # the tool failed: said, and counted as such
                    failed[(tool.name, part)] = failed.get((tool.name, part), 0) + 1
                    print(f"round {r} {tool.name} {part}: FAILED: {str(e).splitlines()[0]}", flush=True)
                    continue
                res.setdefault((tool.name, part), []).append(secs)
                print(f"round {r} {tool.name} {part}: {line}", flush=True)
    print(f"\n{'':12}" + "".join(f"{p:>24}" for p in parts))
    for tool in tools:
        row = f"{tool.name:12}"
        for p in parts:
            v = res.get((tool.name, p))
            if not v:
                row += f"{'-' + (f' ({failed[(tool.name, p)]} failed)' if (tool.name, p) in failed else ''):>24}"
                continue
            med = statistics.median(v)
            base = res.get(("hvdrun", p))
            ratio = f" ({med / statistics.median(base):.2f}x)" if base and tool.name != "hvdrun" else ""
            fails = f" +{failed[(tool.name, p)]} failed" if (tool.name, p) in failed else ""
            row += f"{(f'{med * 1e6:.0f} us' if p == 'commit' else f'{med:.3f} s') + ratio + fails:>24}"
        print(row)
    print("(medians; in brackets: the tool's time over hvdrun's)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
