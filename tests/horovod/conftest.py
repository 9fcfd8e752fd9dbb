"""Real Horovod programs under hvdrun and under horovodrun (the peer).

Run by scripts/test-horovod.sh with the peer venv's python (scripts/horovod-peer.sh builds
it when missing): HVDRUN_PEER_PYTHON names it, HVDRUN_BIN hvdrun (default: the build
tree's). Every job has a deadline (the subprocess time-out, --start-timeout, Horovod's own
HOROVOD_GLOO_TIMEOUT_SECONDS)."""

from __future__ import annotations

import fcntl
import json
import math
import os
import shutil
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import Dict, Iterator, List, Optional

import pytest

REPO = Path(__file__).resolve().parents[2]
PROGRAM = Path(__file__).resolve().parent / "workers" / "horovod_program.py"
CLUSTER_SCRIPT = REPO / "tests" / "cluster" / "cluster.sh"
CLUSTER_LOCK = "/tmp/hvdrun-cluster.lock"


def peer_python() -> str:
    py = os.environ.get("HVDRUN_PEER_PYTHON")
    if not py or not os.access(py, os.X_OK):
        pytest.fail("HVDRUN_PEER_PYTHON does not name the peer venv's python: run these tests with "
                    "scripts/test-horovod.sh (it builds the venv with scripts/horovod-peer.sh)")
    return py


def hvdrun_bin() -> str:
    return os.environ.get("HVDRUN_BIN") or str(REPO / "build" / "cli" / "hvdrun")


class Job:
    def __init__(self, cmd: List[str], proc: subprocess.CompletedProcess, seconds: float) -> None:
        self.cmd = cmd
        self.rc = proc.returncode
        self.out = proc.stdout
        self.err = proc.stderr
        self.seconds = seconds

    def results(self) -> Dict[int, dict]:
        """Each rank's RESULT line, by rank (whatever prefix the launcher puts before it)."""
        out: Dict[int, dict] = {}
        for line in self.out.splitlines():
            at = line.find("RESULT {")
            if at >= 0:
                r = json.loads(line[at + len("RESULT "):])
                assert r["rank"] not in out, f"rank {r['rank']} printed two results\n{self}"
                out[r["rank"]] = r
        return out

    def __str__(self) -> str:
        return (f"{' '.join(self.cmd)}\nrc={self.rc} after {self.seconds:.1f} s\n--- stdout\n{self.out[-5000:]}"
                f"\n--- stderr\n{self.err[-5000:]}")


def clean_env(extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    # Nothing of an enclosing job (hvdrun's or Horovod's) leaks into the launchers.
    e = {k: v for k, v in os.environ.items()
         if not k.startswith(("HOROVOD_", "HVDRUN_RENDEZVOUS", "HVDRUN_SECRET", "OMPI_", "PMI"))}
    e["HOROVOD_GLOO_TIMEOUT_SECONDS"] = "60"
    e.update(extra or {})
    return e


def run(cmd: List[str], timeout: float, env: Dict[str, str]) -> Job:
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=str(REPO),
                           stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as t:
        raise AssertionError(f"{' '.join(cmd)} did not finish within {timeout} s\n{t.stdout}\n{t.stderr}")
    return Job(cmd, p, time.monotonic() - t0)


def program(tag: str, *args: str) -> List[str]:
    return [peer_python(), str(PROGRAM), "--tag", tag, *args]


def horovodrun(np: int, hosts: str, args: List[str], timeout: float = 180,
               env: Optional[Dict[str, str]] = None, prefix: Optional[List[str]] = None,
               flags: Optional[List[str]] = None) -> Job:
    hr = str(Path(peer_python()).parent / "horovodrun")
    return run((prefix or []) + [hr, "--gloo", "-np", str(np), "-H", hosts, "--start-timeout", "60"] +
               (flags or []) + args, timeout,
               clean_env(env))


def hvdrun_horovod(np: int, hosts: str, args: List[str], timeout: float = 180,
                   env: Optional[Dict[str, str]] = None) -> Job:
    return run([hvdrun_bin(), "--horovod", "-np", str(np), "-H", hosts, "--start-timeout", "60"] + args, timeout,
               clean_env(env))


def leftovers(tag: str) -> List[str]:
    """Processes still running the program of this job (the tag is on their command line)."""
    left = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmdline = (d / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if tag.encode() in cmdline and str(PROGRAM).encode() in cmdline:
            left.append(f"{d.name}: {b' '.join(cmdline).decode(errors='replace')}")
    return left


def assert_no_leftovers(tag: str, seconds: float = 10) -> None:
    end = time.monotonic() + seconds
    while leftovers(tag) and time.monotonic() < end:
        time.sleep(0.1)
    assert not leftovers(tag), f"workers still running after the job ended: {leftovers(tag)}"


def new_tag() -> str:
    return "t" + uuid.uuid4().hex[:12]


def assert_same(a, b, where: str = "") -> None:
    """Equal structures; floats equal to 1e-6 relative (the same Gloo ring, the same order)."""
    if isinstance(a, float) or isinstance(b, float):
        assert isinstance(a, (int, float)) and isinstance(b, (int, float)), f"{where}: {a!r} vs {b!r}"
        assert math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-6), f"{where}: {a!r} vs {b!r}"
    elif isinstance(a, dict):
        assert isinstance(b, dict) and sorted(a) == sorted(b), f"{where}: keys {sorted(a)} vs {sorted(b)}"
        for k in a:
            assert_same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), f"{where}: length {len(a)} vs {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{where}[{i}]")
    else:
        assert a == b, f"{where}: {a!r} vs {b!r}"


def results_of(job: Job, np: int) -> Dict[int, dict]:
    assert job.rc == 0, str(job)
    res = job.results()
    assert sorted(res) == list(range(np)), f"results of ranks {sorted(res)}, expected 0..{np - 1}\n{job}"
    for r, v in res.items():
        assert v["size"] == np and v["gloo"] and not v["mpi"], f"rank {r}: {v}\n{job}"
        assert v["failed"] == [], f"rank {r} failed its checks {v['failed']}\n{job}"
    return res


class Cluster:
    """Test hosts (tests/cluster/cluster.sh: network namespaces with their own sshd): the
    ranks go to h1 and h2; horovodrun runs on h3. Horovod picks the interface its ranks
    share by name and serves its rendezvous on the launcher's address on that interface:
    from this machine's own namespace that is its real eth0, which the test hosts (whose
    interface is eth0 too) cannot reach. On h3, as on a real cluster, every host's eth0 is
    on one network; horovodrun is told it (--network-interface eth0), else it may pick lo,
    which every host has too. hvdrun runs from this machine's namespace (over the bridge)."""

    def __init__(self, d: str) -> None:
        self.dir = d
        self.home = os.path.join(d, "home")
        # horovodrun runs `ssh HOST ...` from PATH; OpenSSH reads ~/.ssh of the passwd entry,
        # not $HOME: this ssh uses the cluster's config, key and known_hosts instead.
        self.bin = os.path.join(d, "bin")
        os.makedirs(self.bin)
        s = os.path.join(self.home, ".ssh")
        with open(os.path.join(self.bin, "ssh"), "w") as f:
            f.write(f"#!/bin/sh\nexec /usr/bin/ssh -F {s}/config -i {s}/id_ed25519 -o UserKnownHostsFile={s}/known_hosts "
                    f"-o StrictHostKeyChecking=accept-new -o BatchMode=yes -o ConnectTimeout=10 \"$@\"\n")
        os.chmod(os.path.join(self.bin, "ssh"), 0o755)

    horovodrun_prefix = ["ip", "netns", "exec", "hvdh3"]
    horovodrun_flags = ["--network-interface", "eth0"]

    def horovodrun_env(self) -> Dict[str, str]:
        return {"PATH": self.bin + os.pathsep + os.environ.get("PATH", "")}

    def hvdrun_env(self) -> Dict[str, str]:
        return {"HOME": self.home}

    def leftovers(self, seconds: float = 10) -> str:
        """Processes other than sshd (the daemon, its sessions ending) in the test hosts'
        namespaces, once they had up to `seconds` to go."""
        def now() -> str:
            p = subprocess.run(["sh", "-c", "for n in 1 2 3; do ip netns pids hvdh$n; done | "
                                "xargs -r ps -o pid=,comm=,args= -p | awk '$2 != \"sshd\"' || true"],
                               capture_output=True, text=True, timeout=30)
            return p.stdout.strip()
        end = time.monotonic() + seconds
        left = now()
        while left and time.monotonic() < end:
            time.sleep(0.2)
            left = now()
        return left


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    if os.geteuid() != 0:
        pytest.skip("needs root for the test cluster's network namespaces")
    # One test cluster on this machine at a time (fixed namespace names): the shared lock,
    # waited for with a deadline.
    lock = open(CLUSTER_LOCK, "a")
    end = time.monotonic() + 1200
    while True:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() > end:
                pytest.fail(f"{CLUSTER_LOCK} stayed locked for 20 minutes (another test cluster is up)")
            time.sleep(1)
    d = tempfile.mkdtemp(prefix="hvdrun-hvdpeer-")
    try:
        # This machine's hostname resolving to each host's own address there: Horovod's
        # process-set Gloo contexts ignore HOROVOD_GLOO_IFACE and take their address from it.
        p = subprocess.run([str(CLUSTER_SCRIPT), "up", d, "3"], capture_output=True, text=True, timeout=90,
                           env=dict(os.environ, CLUSTER_OWN_HOSTS="1"))
        assert p.returncode == 0, f"cluster.sh up failed: {p.stderr}"
        yield Cluster(d)
    finally:
        subprocess.run([str(CLUSTER_SCRIPT), "down", d], capture_output=True, text=True, timeout=90)
        shutil.rmtree(d, ignore_errors=True)
        fcntl.flock(lock, fcntl.LOCK_UN)
        lock.close()
