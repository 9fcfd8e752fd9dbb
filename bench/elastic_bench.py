"""Elastic recovery side by side (scripts/bench-elastic.sh runs it): hvdrun against
`horovodrun --gloo` elastic and torchrun (c10d rendezvous, --max-restarts), the same
training loop (bench/elastic_train.py), on one of two sets of hosts:

  --hosts netns   the test hosts of tests/cluster/cluster.sh (network namespaces with their
                  own sshd and address; --cluster DIR, --ns-prefix): 4 ranks on 3 hosts,
                  h1:1 h2:1 h3:2, the one that is lost or added h3 (2 ranks). hvdrun and
                  horovodrun run on a fourth host, h4 (no ranks), and reach the others over
                  ssh; torchrun runs one agent on each host (in a UTS namespace of its own
                  whose hostname is the host's name, as on a real cluster: torchrun hands
                  its workers the rank 0 agent's hostname as MASTER_ADDR), its c10d store on h1.
  --hosts local   this machine with two host names, localhost:2 and 127.0.0.1:2 (both this
                  machine to Horovod and hvdrun, which start them without ssh; torchrun gets
                  one agent per name), the one lost or added 127.0.0.1.

Per tool and round, three measurements from the loop's log (one clock, this machine's):
  lost    SIGKILL of every rank of the lost host (torchrun: its agent too) -> the first
          completed step at the new size; and whether the survivors kept their PIDs.
  added   the host written into the discovery file (torchrun: its agent started) -> the
          first completed step at the larger size.
  commit  state.commit() with nothing changed, seconds per call (Horovod's API only).
Prints one line per measurement and a table of medians with ratios against hvdrun.
"""
from __future__ import annotations

import argparse
import os
import shutil
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
KEEP: List[Path] = []  # --keep: where each launch's output and log are copied
Hosts = List[Tuple[str, int]]


class Layout:
    """Where the ranks go: `full` (every host), `victim` (the host lost, or added to the
    others), how a command runs on a host and where the launchers run."""

    def __init__(self, full: Hosts, victim: str):
        self.full, self.victim = full, victim
        self.rest = [(h, n) for h, n in full if h != victim]
        self.size = sum(n for _, n in full)
        self.small = sum(n for _, n in self.rest)
        self.launch_prefix: List[str] = []
        self.launch_env: Dict[str, str] = {}
        self.horovodrun_flags = ["--network-interface", "lo"]

    def on_host(self, host: str) -> List[str]:
        return []

    def address(self, host: str) -> str:
        return "127.0.0.1"

    def clean(self) -> None:
        """Ends whatever a finished launch left on the hosts."""


class LocalLayout(Layout):
    def __init__(self) -> None:
        super().__init__([("localhost", 2), ("127.0.0.1", 2)], "127.0.0.1")


class NetnsLayout(Layout):
    def __init__(self, cluster: Path, ns_prefix: str):
        super().__init__([("h1", 1), ("h2", 1), ("h3", 2)], "h3")
        self.ns = {h: ns_prefix + h[1:] for h in ("h1", "h2", "h3", "h4")}
        self.addr = dict(l.split() for l in (cluster / "hosts.txt").read_text().splitlines())
        # The launchers on h4, as on a real cluster's login host: hvdrun finds the hosts'
        # ssh config and key in HOME; horovodrun runs `ssh` from PATH (cluster's bin/ssh).
        self.launch_prefix = ["ip", "netns", "exec", self.ns["h4"]]
        self.launch_env = {"HOME": str(cluster / "home"),
                           "PATH": f"{cluster / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"}
        self.horovodrun_flags = ["--network-interface", "eth0"]

    def on_host(self, host: str) -> List[str]:
        return ["ip", "netns", "exec", self.ns[host], "unshare", "--uts", "sh", "-c",
                'hostname "$0" && exec "$@"', host]

    def address(self, host: str) -> str:
        return self.addr[host]

    def clean(self) -> None:
        # Everything but sshd on the hosts (a launcher torn down may leave its remote
        # processes for a while), so that no run loads the next one.
        for _ in range(50):
            pids = []
            for ns in self.ns.values():
                got = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split()
                pids += [int(p) for p in got if Path(f"/proc/{p}/comm").exists()
                         and Path(f"/proc/{p}/comm").read_text().strip() != "sshd"]
            if not pids:
                return
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.1)


class Run:
    """One launch of the training loop, its log, and the processes behind it."""

    def __init__(self, tool: "Tool", layout: Layout, work: Path, hosts: Hosts, steps: int, extra: List[str]):
        self.tool, self.layout, self.work, self.log = tool, layout, work, work / "log"
        self.part = "commit" if extra else ("lost" if hosts == layout.full else "added")
        self.log.write_text("")
        self.hosts_file = work / "hosts"
        self.set_hosts(hosts)
        self.procs: List[subprocess.Popen] = []
        self.train = [tool.python, str(TRAIN), "--record", str(self.log), "--steps", str(steps)] + extra
        self.out = open(work / "out", "w")

    def set_hosts(self, hosts: Hosts) -> None:
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
        self.layout.clean()
        if KEEP:
            n = len(list(KEEP[0].glob("*.out")))
            for f in ("out", "log"):
                shutil.copy(self.work / f, KEEP[0] / f"{n:03d}-{self.tool.name}-{self.part}.{f}")


class Tool:
    name = ""

    def __init__(self, python: str):
        self.python = python

    def start(self, run: Run, np: int, min_np: int, max_np: int, hosts: Hosts) -> None:
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

    def start(self, run: Run, np: int, min_np: int, max_np: int, hosts: Hosts) -> None:
        disc = run.work / "discover.sh"
        disc.write_text(f"#!/bin/sh\ncat {run.hosts_file}\n")
        disc.chmod(0o755)
        lay = run.layout
        flags = lay.horovodrun_flags if self.name == "horovodrun" else []
        cmd = lay.launch_prefix + self.launcher + flags + [
            "-np", str(np), "--min-np", str(min_np), "--max-np", str(max_np),
            "--host-discovery-script", str(disc)] + run.train + ["--impl", "horovod"]
        run.procs.append(subprocess.Popen(cmd, stdout=run.out, stderr=subprocess.STDOUT, start_new_session=True,
                                          env=dict(os.environ, **lay.launch_env)))


class Torchrun(Tool):
    name = "torchrun"

    def __init__(self, python: str, port: int):
        super().__init__(python)
        self.port = port
        self.agents: Dict[str, subprocess.Popen] = {}

    def agent(self, run: Run, host: str, slots: int) -> None:
        lay = run.layout
        # (GLOO_SOCKET_IFNAME: the workers' Gloo on the hosts' network, whatever the hostname says)
        env = dict(os.environ, HOROVOD_HOSTNAME=host, **({"GLOO_SOCKET_IFNAME": "eth0"} if lay.on_host(host) else {}))
        store = lay.address(lay.full[0][0])
        nodes = f"--nnodes={len(lay.full) - 1}:{len(lay.full)}"
        cmd = lay.on_host(host) + [
               self.python, "-m", "torch.distributed.run", nodes, f"--nproc_per_node={slots}",
               "--rdzv_backend=c10d", f"--rdzv_endpoint={store}:{self.port}", f"--rdzv_id=bench{self.port}",
               "--max_restarts=5", "--monitor_interval=0.1", "--rdzv_conf=last_call_timeout=1",
               # Debian's torch 1.13 on Python 3.11 reads the default "0" of both as None
               # and fails (3.11 iterates only single-bit flags): 1 and 2 work on every version.
               "--redirects=1", "--tee=2", f"--log_dir={run.work / ('torchrun-' + host)}"] + \
            run.train[1:] + ["--impl", "ddp", "--checkpoint", str(run.work / "ckpt")]
        p = subprocess.Popen(cmd, stdout=run.out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        self.agents[host] = p
        run.procs.append(p)

    def start(self, run: Run, np: int, min_np: int, max_np: int, hosts: Hosts) -> None:
        self.port += 1
        self.agents = {}
        for i, (h, n) in enumerate(hosts):
            self.agent(run, h, n)
            if i == 0:  # the first host's agent holds the c10d store: the host that is never lost
                run.wait_for(lambda: self.store_up(run.layout), 60, "torchrun's c10d store")

    def store_up(self, lay: Layout) -> Optional[bool]:
        # (from the store's host: this machine's namespace may have no route to it)
        addr = lay.address(lay.full[0][0])
        probe = [sys.executable, "-c", f"import socket; socket.create_connection(('{addr}', {self.port}), timeout=1)"]
        if lay.on_host(lay.full[0][0]):
            probe = ["ip", "netns", "exec", lay.ns[lay.full[0][0]]] + probe
            return True if subprocess.run(probe, capture_output=True).returncode == 0 else None
        try:
            socket.create_connection((addr, self.port), timeout=1).close()
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


def survivor_pids(run: Run) -> set:
    return {pid for h, _ in run.layout.rest for pid in run.ranks_of(h)}


def measure_lost(tool: Tool, lay: Layout, warm: int, deadline: float) -> Tuple[float, bool]:
    with tempfile.TemporaryDirectory(prefix="hvd-elastic-") as d:
        run = Run(tool, lay, Path(d), lay.full, 10**6, [])
        tool.start(run, lay.size, lay.small, lay.size, lay.full)
        try:
            run.wait_for(lambda: True if run.steps_at(lay.size) >= warm else None, deadline,
                         f"{warm} steps at size {lay.size}")
            survivors = survivor_pids(run)
            t_kill = time.time()
            tool.lose(run, lay.victim)
            run.set_hosts(lay.rest)
            t = run.wait_for(lambda: run.first_step_after(t_kill, lay.small), deadline,
                             f"a step at size {lay.small} after the kill")
            return t - t_kill, survivor_pids(run) == survivors
        finally:
            run.finish(0)


def measure_added(tool: Tool, lay: Layout, warm: int, deadline: float) -> float:
    with tempfile.TemporaryDirectory(prefix="hvd-elastic-") as d:
        run = Run(tool, lay, Path(d), lay.rest, 10**6, [])
        tool.start(run, lay.small, lay.small, lay.size, lay.rest)
        try:
            run.wait_for(lambda: True if run.steps_at(lay.small) >= warm else None, deadline,
                         f"{warm} steps at size {lay.small}")
            t_add = time.time()
            run.set_hosts(lay.full)
            if isinstance(tool, Torchrun):
                tool.agent(run, lay.victim, dict(lay.full)[lay.victim])
            t = run.wait_for(lambda: run.first_step_after(t_add, lay.size), deadline,
                             f"a step at size {lay.size} after the add")
            return t - t_add
        finally:
            run.finish(0)


def measure_commit(tool: Tool, lay: Layout, calls: int, deadline: float) -> Tuple[float, float]:
    with tempfile.TemporaryDirectory(prefix="hvd-elastic-") as d:
        run = Run(tool, lay, Path(d), lay.full, 10**6, ["--commit-cost", str(calls)])
        tool.start(run, lay.size, lay.small, lay.size, lay.full)
        try:
            got = run.wait_for(lambda: (run.lines("check") or [None])[0], deadline, "the commit figures")
            return float(run.lines("commit")[0][1]), float(got[1])
        finally:
            run.finish(deadline)


def parse_args() -> argparse.Namespace:
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
    ap.add_argument("--hosts", choices=("netns", "local"), default="local")
    ap.add_argument("--cluster", type=Path, help="netns: the directory of `tests/cluster/cluster.sh up`")
    ap.add_argument("--ns-prefix", default="hvdh", help="netns: the hosts' namespace names less their number")
    ap.add_argument("--horovodrun-flags", default="", help="more flags for horovodrun (e.g. --verbose)")
    ap.add_argument("--keep", type=Path, help="a directory: each launch's output and log copied there")
    return ap.parse_args()


def measure(tool: Tool, lay: Layout, part: str, a: argparse.Namespace, res: Dict[Tuple[str, str], List[float]],
            kept_pids: Dict[str, List[bool]]) -> Tuple[float, str]:
    """One measurement of `part`: its figure and the line that says it."""
    if part == "lost":
        secs, kept = measure_lost(tool, lay, a.warm, a.deadline)
        kept_pids.setdefault(tool.name, []).append(kept)
        return secs, f"{secs:.3f} s to the first step at size {lay.small}; survivors kept their PIDs: {kept}"
    if part == "added":
        secs = measure_added(tool, lay, a.warm, a.deadline)
        return secs, f"{secs:.3f} s to the first step at size {lay.size}"
    secs, check = measure_commit(tool, lay, a.commit_calls, a.deadline)
    res.setdefault((tool.name, "check"), []).append(check)
    return secs, f"{secs * 1e6:.1f} us per call; check_host_updates() alone {check * 1e6:.1f} us"


def print_table(tools: List[Tool], parts: List[str], res: Dict[Tuple[str, str], List[float]],
                failed: Dict[Tuple[str, str], int], kept_pids: Dict[str, List[bool]]) -> None:
    if "commit" in parts:
        parts.append("check")
    print(f"\n{'':12}" + "".join(f"{p:>34}" for p in parts))
    for tool in tools:
        row = f"{tool.name:12}"
        for p in parts:
            v = res.get((tool.name, p))
            fails = f" +{failed[(tool.name, p)]} failed" if (tool.name, p) in failed else ""
            if not v:
                row += f"{'-' + fails:>34}"
                continue
            us = p in ("commit", "check")
            fmt = (lambda x: f"{x * 1e6:.0f}") if us else (lambda x: f"{x:.3f}")
            base = res.get(("hvdrun", p))
            ratio = f"; {statistics.median(v) / statistics.median(base):.2f}x" if base and tool.name != "hvdrun" else ""
            cell = f"{fmt(statistics.median(v))} {'us' if us else 's'} ({fmt(min(v))}-{fmt(max(v))}{ratio}){fails}"
            row += f"{cell:>34}"
        print(row)
    print("(medians, in brackets min-max and the tool's median over hvdrun's)")
    if kept_pids:
        print("survivors kept their PIDs: " + ", ".join(f"{t} {sum(v)} of {len(v)}" for t, v in kept_pids.items()))


def main() -> int:
    a = parse_args()
    if a.keep:
        a.keep.mkdir(parents=True, exist_ok=True)
        KEEP.append(a.keep)
    lay = NetnsLayout(a.cluster, a.ns_prefix) if a.hosts == "netns" else LocalLayout()
    tools: List[Tool] = []
    for name in a.tools.split(","):
        if name == "hvdrun":
            tools.append(HorovodLike("hvdrun", a.hvdrun_python, [a.hvdrun, "--horovod-compat"]))
        elif name == "horovodrun":
            tools.append(HorovodLike("horovodrun", a.python, [a.horovodrun, "--gloo"] + a.horovodrun_flags.split()))
        elif name == "torchrun":
            tools.append(Torchrun(a.python, 29500 + os.getpid() % 1000))
    res: Dict[Tuple[str, str], List[float]] = {}
    failed: Dict[Tuple[str, str], int] = {}
    kept_pids: Dict[str, List[bool]] = {}
    parts = a.parts.split(",")
    for r in range(a.rounds):
        for tool in tools:  # the tools alternate within each round
            for part in parts:
                if part == "commit" and isinstance(tool, Torchrun):
                    continue  # (no elastic API: nothing to commit)
                try:
                    secs, line = measure(tool, lay, part, a, res, kept_pids)
                except RuntimeError as e:  # the tool failed: said, and counted as such
                    failed[(tool.name, part)] = failed.get((tool.name, part), 0) + 1
                    print(f"round {r} {tool.name} {part}: FAILED: {str(e).splitlines()[0]}", flush=True)
                    continue
                res.setdefault((tool.name, part), []).append(secs)
                print(f"round {r} {tool.name} {part}: {line}", flush=True)
    print_table(tools, parts, res, failed, kept_pids)
    return 0


if __name__ == "__main__":
    sys.exit(main())
