#!/usr/bin/env python3
"""The chaos suite's elastic trials (issue 28): ranks killed at random moments of a real
training loop under hvdrun's elastic mode.

    tests/chaos/chaos_elastic.py [--build DIR] [--seed S] [--trials N] [--only-job J] [-v]

A job is hvdrun --min-np 1 --max-np 4 over four names of this machine (HOSTS, one slot
each, listed by a discovery script) with --blacklist-cooldown-range 1 1, so that a failed
host comes back after a second; its workers are chaos_elastic_worker.py (Debian's /usr/bin/python3 with
torch: a linear model, DistributedOptimizer, ElasticSampler, hvdrun.torch.elastic.run over
a TorchState that also holds the sample indices each batch saw). Job J of seed S draws
its sample count, batch size and KILLS kills from random.Random("S/J") alone: each kill
waits for 0-3 more batches of a round of at least two ranks none of which was killed
before, a random moment into the next batch, then SIGKILLs a random rank of that round or
makes it raise an exception at a random point of its next batch (forward, backward, the
gather, the commit). Each kill is one trial, which passes when hvdrun resets once for it,
naming the victim's host and cause ("killed by signal 9", "exited with code 1"), and
training goes on in a round of at least two ranks without the victim. After the job's
last trial the driver asks the workers to stop at the end of the epoch (CE_DIR/stop; rank
0 broadcasts it). The job must then exit 0, every rank of the last round must report the
same parameter digest and the same record, each epoch's record must hold every sample
exactly once (besides the sampler's padding, at most size-1 repeats at an epoch's end),
and nothing may be left: no process with the job's marker, no new file in /dev/shm.

A failed trial or job is a finding, printed with its seed and job, never retried:
`--seed S --only-job J` runs that job again (the same plan; the moments depend on timing).
"""
import argparse
import importlib.util
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
PYTHON = "/usr/bin/python3"  # Debian's, with torch
HOSTS = ["localhost", "127.0.0.1", "127.0.0.2", "127.0.0.3"]
KILLS = 34                   # kills (trials) per job
WAIT = 60                    # s: the deadline of every wait for the job's progress
JOB_DEADLINE = 240           # s: the whole job's
RAISE_POINTS = ("forward", "backward", "gather", "commit")


def load_chaos():
    """The chaos suite's helpers (leftovers, the private /dev/shm)."""
    from importlib.machinery import SourceFileLoader
    loader = SourceFileLoader("chaos_suite", os.path.join(HERE, "chaos"))
    spec = importlib.util.spec_from_loader("chaos_suite", loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


chaos = load_chaos()


class Plan:
    """Job J of seed S: everything drawn from random.Random("S/J")."""

    def __init__(self, seed, job):
        rng = random.Random(f"{seed}/{job}")
        self.seed, self.job = seed, job
        self.samples = rng.randint(17, 41)
        self.batch = rng.choice([1, 2, 3])
        self.kills = []
        for _ in range(KILLS):
            how = rng.choice(["SIGKILL", "SIGKILL", "raise"])
            self.kills.append(dict(how=how, point=rng.choice(RAISE_POINTS), after=rng.randint(0, 3),
                                   delay=rng.uniform(0, 0.04), pick=rng.random()))

    def describe(self):
        return f"seed {self.seed} job {self.job} ({self.samples} samples, batch {self.batch})"


class Job:
    """hvdrun and its output, read by two threads; waits on it have deadlines."""

    def __init__(self, build, tdir, plan, marker):
        self.lines, self.err = [], []
        self.cv = threading.Condition()
        disc = os.path.join(tdir, "discover.sh")
        with open(disc, "w") as f:
            f.write("#!/bin/sh\nprintf '" + "".join(h + ":1\\n" for h in HOSTS) + "'\n")
        os.chmod(disc, 0o755)
        env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "python"), CE_DIR=tdir, CE_MARKER=marker,
                   HVDRUN_LIBRARY=os.path.join(build, "collectives", "libhvdrun.so"), TMPDIR=tdir,
                   CE_SAMPLES=str(plan.samples), CE_BATCH=str(plan.batch), CE_EPOCHS="1000")
        for i, h in enumerate(HOSTS):
            env["CE_SLOT_NO_" + h.replace(".", "_")] = str(i)
        argv = [os.path.join(build, "cli", "hvdrun"), "--min-np", "1", "--max-np", str(len(HOSTS)),
                "--host-discovery-script", disc, "--blacklist-cooldown-range", "1", "1",
                PYTHON, os.path.join(HERE, "chaos_elastic_worker.py")]
        self.proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, start_new_session=True)
        self.readers = [threading.Thread(target=self.read, args=(s, d), daemon=True)
                        for s, d in ((self.proc.stdout, self.lines), (self.proc.stderr, self.err))]
        for t in self.readers:
            t.start()

    def read(self, stream, into):
        for line in stream:
            with self.cv:
                into.append(line.rstrip("\n"))
                self.cv.notify_all()

    def steps(self, start):
        """The STEP lines from index start: (index, size, pids, slots)."""
        out = []
        for i in range(start, len(self.lines)):
            m = re.search(r"STEP epoch=\d+ batch=\d+ size=(\d+) pids=(\S+) slots=(\S+)", self.lines[i])
            if m:
                out.append((i, int(m[1]), [int(p) for p in m[2].split(",")], [int(s) for s in m[3].split(",")]))
        return out

    def wait_round(self, start, killed, count, least=2):
        """The count-th STEP line from index start of a round of >= least ranks none of them
        killed, or None after WAIT s or at hvdrun's exit."""
        deadline = time.monotonic() + WAIT
        with self.cv:
            while True:
                good = [s for s in self.steps(start) if s[1] >= least and not set(s[2]) & killed]
                if len(good) >= count:
                    return good[count - 1]
                left = deadline - time.monotonic()
                if left <= 0 or self.proc.poll() is not None:
                    return None
                self.cv.wait(min(left, 0.5))

    def finish(self, timeout):
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            rc = self.proc.wait(timeout=30)
            rc = f"killed after {timeout:.0f} s (was {rc})"
        for t in self.readers:
            t.join(timeout=10)
        return rc


def kill(job, tdir, k, step, killed):
    """Kill k on the round of STEP line `step`: the victim's (pid, host)."""
    _, _, pids, slots = step
    n = min(int(k["pick"] * len(pids)), len(pids) - 1)
    pid, host = pids[n], HOSTS[slots[n]]
    time.sleep(k["delay"])  # the moment into the batch (drawn), not an ordering
    if k["how"] == "SIGKILL":
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            return pid, host, "the victim was gone before its kill"
    else:
        with open(os.path.join(tdir, "raise." + host + ":0"), "w") as f:
            f.write(k["point"])
    killed.add(pid)
    return pid, host, None


def expected_cause(k):
    return "was killed by signal 9" if k["how"] == "SIGKILL" else "exited with code 1"


def run_kills(job, tdir, plan, verbose):
    """Runs the plan's kills; returns the trials: [kill, host, problem or None]."""
    trials, killed = [], set()
    step = job.wait_round(0, killed, 1)
    for k in plan.kills:
        if step is None:
            break
        if k["after"]:
            step = job.wait_round(step[0] + 1, killed, k["after"])
            if step is None:
                break
        pid, host, why = kill(job, tdir, k, step, killed)
        trial = [k, host, why]
        trials.append(trial)
        step = job.wait_round(step[0] + 1, killed, 1)
        if step is None and why is None:
            trial[2] = f"no round of >= 2 ranks without the victim within {WAIT} s"
        if verbose:
            print(f"chaos_elastic: {plan.describe()}: {k['how']} {k['point'] if k['how'] == 'raise' else ''} "
                  f"of pid {pid} on {host}: {trial[2] or 'recovered'}", flush=True)
    return trials


def judge_resets(job, trials):
    """Each trial's reset: the failed resets, in order, name the trials' hosts and causes."""
    failed = [m for m in (re.search(r"hvdrun: reset \d+: host (\S+) failed \(rank \d+ (.*?)[;)]", e)
                          for e in job.err) if m]
    for n, t in enumerate(trials):
        if t[2]:
            continue
        if n >= len(failed):
            t[2] = "no reset line for it"
        elif failed[n][1] != t[1] or not failed[n][2].startswith(expected_cause(t[0])):
            t[2] = f"reset names host {failed[n][1]} ({failed[n][2]}), expected {t[1]} ({expected_cause(t[0])})"
    if len(failed) > len(trials):
        return [f"{len(failed)} failed resets for {len(trials)} kills: " + "; ".join(m[0] for m in failed)]
    return []


def judge_record(job, tdir, samples):
    """The ranks agree; each epoch saw every sample once (besides the padding)."""
    problems = []
    done = [re.search(r"DONE rank=(\d+) size=(\d+) params=(\S+) seen=(\S+)", ln) for ln in job.lines]
    done = [d for d in done if d]
    if not done or len(done) != int(done[0][2]) or len({(d[3], d[4]) for d in done}) != 1:
        problems.append("the last round's ranks disagree or are missing: " + "; ".join(d[0] for d in done))
    try:
        with open(os.path.join(tdir, "seen.json")) as f:
            seen = json.load(f)
    except (OSError, ValueError) as e:
        return problems + [f"no record: {e}"]
    if not seen:
        problems.append("no epoch ran")
    for e, batches in enumerate(seen):
        flat = [i for rows in batches for row in rows for i in row]
        real = sorted(i for i in flat if i >= 0)
        if real != list(range(samples)):
            dup = sorted({i for i in real if real.count(i) > 1})
            miss = sorted(set(range(samples)) - set(real))
            problems.append(f"epoch {e}: samples seen twice {dup}, never {miss}")
        if flat.count(-1) > len(HOSTS) - 1:
            problems.append(f"epoch {e}: {flat.count(-1)} padded samples")
    return problems


def run_job(plan, build, base, verbose):
    """One job: its trials and the job's own problems."""
    tdir = tempfile.mkdtemp(prefix=f"job{plan.job}.", dir=base)
    marker = f"hvdrun-chaos-elastic-{os.getpid()}-{plan.seed}-{plan.job}"
    shm_before = chaos.shm_entries()
    job = Job(build, tdir, plan, marker)
    problems = []
    try:
        trials = run_kills(job, tdir, plan, verbose)
        open(os.path.join(tdir, "stop"), "w").close()
        rc = job.finish(JOB_DEADLINE)
    finally:
        if job.proc.poll() is None:
            os.killpg(job.proc.pid, signal.SIGKILL)
            job.proc.wait(timeout=30)
    if rc != 0:
        problems.append(f"hvdrun exited {rc}")
    problems += judge_resets(job, trials) + judge_record(job, tdir, plan.samples)
    deadline = time.monotonic() + 10
    while (left := chaos.leftovers(marker, {})) and time.monotonic() < deadline:
        time.sleep(0.1)
    if left:
        chaos.kill_all(left)
        problems.append("left behind: " + "; ".join(f"{p} {s} {c} ({w})" for p, s, c, w in left))
    new_shm = chaos.shm_entries() - shm_before
    if new_shm:
        problems.append("left in /dev/shm: " + ", ".join(sorted(new_shm)))
    if problems or any(t[2] for t in trials):
        problems.append("hvdrun's stderr (end):\n      " + "\n      ".join(job.err[-25:]))
    shutil.rmtree(tdir, ignore_errors=True)
    return trials, problems


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(REPO, "build"), help="the build folder (default: build/)")
    ap.add_argument("--seed", type=int, default=int(os.environ.get("HVDRUN_CHAOS_SEED", "0")) or None,
                    help="the run's seed (default: $HVDRUN_CHAOS_SEED, else the time)")
    ap.add_argument("--trials", type=int, default=100, help="at least this many trials (kills), KILLS a job")
    ap.add_argument("--only-job", type=int, action="append", help="run only job J (repeatable)")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every trial")
    a = ap.parse_args()
    seed = a.seed if a.seed is not None else int(time.time())
    if chaos.private_shm(seed if a.seed is None else None):
        return 2
    if subprocess.run([PYTHON, "-c", "import torch"], capture_output=True, timeout=120).returncode != 0:
        print(f"chaos_elastic: {PYTHON} has no torch: skipped")
        return 0
    jobs = a.only_job or list(range((a.trials + KILLS - 1) // KILLS))
    print(f"chaos_elastic: seed {seed}, jobs {jobs}; reproduce a job with: {sys.argv[0]} --seed {seed} "
          f"--only-job J", flush=True)
    base = tempfile.mkdtemp(prefix="hvdrun-chaos-elastic.")
    t0, ntrials, failed = time.monotonic(), 0, []
    try:
        for j in jobs:
            plan = Plan(seed, j)
            trials, problems = run_job(plan, a.build, base, a.verbose)
            ntrials += len(trials)
            bad = [t for t in trials if t[2]]
            for n, t in enumerate(trials):
                if t[2]:
                    print(f"chaos_elastic: FAIL {plan.describe()} kill {n} ({t[0]['how']} on {t[1]}): {t[2]}")
            for p in problems:
                print(f"chaos_elastic: FAIL {plan.describe()}: {p}")
            print(f"chaos_elastic: {plan.describe()}: {len(trials)} kills, {len(bad)} failed"
                  + (", the job failed" if problems else ""), flush=True)
            if bad or problems:
                failed.append(j)
            if len(trials) < KILLS and not problems:
                failed.append(j)
                print(f"chaos_elastic: FAIL {plan.describe()}: only {len(trials)} of {KILLS} kills ran")
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print(f"\nchaos_elastic: seed {seed}: {ntrials} trials in {len(jobs)} jobs in {time.monotonic() - t0:.0f} s, "
          f"{len(failed)} jobs failed" + (f": {sorted(set(failed))}" if failed else ""))
    return 1 if failed or ntrials < min(a.trials, KILLS * len(jobs)) else 0


if __name__ == "__main__":
    sys.exit(main())
