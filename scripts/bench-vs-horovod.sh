#!/usr/bin/env bash
# hvdrun side by side with the real Horovod 0.28.1 (PyTorch + Gloo, the cached build of
# scripts/horovod-peer.sh), in one run, the tools alternating within each round, on the
# same machine and the same Python and PyTorch (the peer venv's: Debian's torch 1.13):
#   1. launch: `horovodrun -np N -H localhost:N` vs `hvdrun -np N` (N in $LAUNCH_NP, default
#      1 4 16) for `true` and for a Python `hvd.init(); hvd.shutdown()`: real Horovod under
#      horovodrun, hvdrun.torch under hvdrun, and real Horovod under `hvdrun --horovod`;
#      median wall time of $REPS runs each, ratios hvdrun / horovodrun. As root (CLUSTER=1,
#      the default), the same on 2 test-cluster hosts (tests/cluster/cluster.sh, under
#      /tmp/hvdrun-cluster.lock): horovodrun runs on a third test host, hvdrun from here.
#   2. allreduce: float32 sum of torch tensors, 2 ranks, $MIN..$MAX bytes (default 4 KiB ..
#      256 MiB): real Horovod (Gloo) under horovodrun vs hvdrun.torch, busbw per size (median
#      of $ROUNDS rounds), ratio hvdrun.torch / Horovod.
#   3. training step: bench/torch_step.py, same model, batch and threads, 2 ranks: real
#      Horovod's DistributedOptimizer under horovodrun, hvdrun.torch's under hvdrun, and real
#      Horovod under `hvdrun --horovod`; median step time, speed-up over horovodrun.
# Parts: PARTS="launch allreduce step cluster" (default all). The machine should be quiet:
# the load average is printed before and after each part.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
REPS=${REPS:-5}
ROUNDS=${ROUNDS:-2}
MIN=${MIN:-4096}
MAX=${MAX:-268435456}
LAUNCH_NP=${LAUNCH_NP:-1 4 16}
MODELS=${MODELS:-example mlp50m}
STEPS=${STEPS:-10}
PARTS=${PARTS:-launch allreduce step cluster}
CLUSTER=${CLUSTER:-1}

PY=$(scripts/horovod-peer.sh | tail -1)
HOROVODRUN=$(dirname "$PY")/horovodrun
if ! [ -x "$BUILD_DIR/cli/hvdrun" ] || ! [ -e "$BUILD_DIR/collectives/libhvdrun.so" ]; then
  scripts/build.sh --target hvdrun --target libhvdrun >/dev/null
fi
HVDRUN=$PWD/$BUILD_DIR/cli/hvdrun
export HVDRUN_LIBRARY=$PWD/$BUILD_DIR/collectives/libhvdrun.so
export PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH}
# Neither launcher inherits an enclosing job.
for v in $(compgen -e); do
  case $v in HOROVOD_* | HVDRUN_RENDEZVOUS* | HVDRUN_SECRET*) unset "$v" ;; esac
done
HOROVOD_FLAG=0
"$HVDRUN" --help 2>&1 | grep -qE -- '^ *--horovod( |,|$)' && HOROVOD_FLAG=1
has() { [[ " $PARTS " == *" $1 "* ]]; }
load() { echo "bench-vs-horovod: load $1: $(cut -d' ' -f1-3 /proc/loadavg) ($(nproc) cores)"; }
OUT=$(mktemp -d)
CDIR=
cleanup() {
  if [ -n "$CDIR" ]; then tests/cluster/cluster.sh down "$CDIR" >/dev/null 2>&1 || true; rm -rf "$CDIR"; fi
  rm -rf "$OUT"
}
trap cleanup EXIT
echo "bench-vs-horovod: $(date -u +%FT%TZ), $("$PY" -c 'import horovod, torch; print("Horovod", horovod.__version__, "(Gloo), torch", torch.__version__)'), $PY"
[ "$HOROVOD_FLAG" = 1 ] || echo "bench-vs-horovod: this hvdrun has no --horovod: real Horovod under hvdrun is left out"

INIT_HOROVOD='import horovod.torch as hvd; hvd.init(); hvd.shutdown()'
INIT_HVDRUN='import hvdrun.torch as hvd; hvd.init(); hvd.shutdown()'

# One timed run: label, then the command; appends "label ms" to $OUT/launch. A failed run
# fails the benchmark (its output shown): a launcher that fails is not fast.
timed() {
  local label=$1 t0 t1
  shift
  t0=$(date +%s%N)
  if ! "$@" >"$OUT/last" 2>&1 </dev/null; then
    echo "bench-vs-horovod: $label failed: $*"; tail -20 "$OUT/last"; exit 1
  fi
  t1=$(date +%s%N)
  echo "$label $(( (t1 - t0) / 1000 ))" >>"$OUT/launch"
}

launch_round() {  # where (local|cluster), then the runs' settings per N
  local where=$1 n hr_hosts hv_hosts pre=() henv=() venv=() flags=()
  for n in $LAUNCH_NP; do
    if [ "$where" = local ]; then
      hr_hosts=localhost:$n hv_hosts=localhost:$n
    else
      # 2 hosts, N ranks in all (N >= 2): half on each.
      ((n >= 2)) || continue
      hr_hosts=h1:$((n - n / 2)),h2:$((n / 2)) hv_hosts=$hr_hosts
      pre=(ip netns exec hvdh3) henv=(env PATH="$CDIR/bin:$PATH") venv=(env HOME="$CDIR/home")
      flags=(--network-interface eth0)
    fi
    timed "$where.true.horovodrun.$n" "${pre[@]}" "${henv[@]}" "$HOROVODRUN" -np "$n" -H "$hr_hosts" "${flags[@]}" true
    timed "$where.true.hvdrun.$n" "${venv[@]}" "$HVDRUN" -np "$n" -H "$hv_hosts" true
    timed "$where.init.horovodrun.$n" "${pre[@]}" "${henv[@]}" "$HOROVODRUN" --gloo -np "$n" -H "$hr_hosts" "${flags[@]}" \
      "$PY" -c "$INIT_HOROVOD"
    timed "$where.init.hvdrun.$n" "${venv[@]}" "$HVDRUN" -np "$n" -H "$hv_hosts" "$PY" -c "$INIT_HVDRUN"
    if [ "$HOROVOD_FLAG" = 1 ]; then
      timed "$where.init.hvdrun-horovod.$n" "${venv[@]}" "$HVDRUN" --horovod -np "$n" -H "$hv_hosts" "$PY" -c "$INIT_HOROVOD"
    fi
  done
}

launch_table() {  # where
  "$PY" - "$OUT/launch" "$1" "$LAUNCH_NP" <<'PY'
import collections, statistics, sys
path, where, nps = sys.argv[1], sys.argv[2], sys.argv[3].split()
t = collections.defaultdict(list)
for line in open(path):
    k, us = line.split()
    t[k].append(int(us) / 1000)
def med(k):
    return statistics.median(t[k]) if t.get(k) else None
print(f"\nlaunch ({where}), median wall ms of {len(next(iter(t.values())))} runs; ratio = hvdrun / horovodrun")
print(f"{'N':>3} {'what':<6} {'horovodrun':>11} {'hvdrun':>9} {'ratio':>7} {'hvdrun --horovod':>17} {'ratio':>7}")
for n in nps:
    for what in ("true", "init"):
        h, v, hh = (med(f"{where}.{what}.{tool}.{n}") for tool in ("horovodrun", "hvdrun", "hvdrun-horovod"))
        if h is None:
            continue
        extra = f"{hh:17.0f} {hh / h:7.3f}" if hh is not None else f"{'-':>17} {'-':>7}"
        print(f"{n:>3} {what:<6} {h:11.0f} {v:9.0f} {v / h:7.3f} {extra}")
print("(init: horovodrun and hvdrun --horovod run real Horovod's hvd.init(); hvd.shutdown(), "
      "hvdrun runs hvdrun.torch's)")
PY
}

if has launch; then
  load "before launch"
  for ((r = 0; r < REPS; r++)); do launch_round local; done
  load "after launch"
  launch_table local
fi

if has cluster && [ "$CLUSTER" = 1 ] && [ "$(id -u)" = 0 ]; then
  exec 8>/tmp/hvdrun-cluster.lock
  flock 8
  CDIR=$(mktemp -d)
  # This machine's hostname resolving to each host's own address there (Horovod's
  # process-set Gloo contexts take their address from it), and an ssh for horovodrun that
  # uses the cluster's keys (OpenSSH reads the passwd entry's ~/.ssh, not $HOME's).
  CLUSTER_OWN_HOSTS=1 tests/cluster/cluster.sh up "$CDIR" 3 >/dev/null
  mkdir -p "$CDIR/bin"
  s=$CDIR/home/.ssh
  printf '#!/bin/sh\nexec /usr/bin/ssh -F %s/config -i %s/id_ed25519 -o UserKnownHostsFile=%s/known_hosts -o StrictHostKeyChecking=accept-new -o BatchMode=yes "$@"\n' \
    "$s" "$s" "$s" >"$CDIR/bin/ssh"
  chmod +x "$CDIR/bin/ssh"
  : >"$OUT/launch"
  load "before launch on 2 test-cluster hosts"
  for ((r = 0; r < REPS; r++)); do launch_round cluster; done
  load "after launch on 2 test-cluster hosts"
  tests/cluster/cluster.sh down "$CDIR" >/dev/null
  rm -rf "$CDIR"
  CDIR=
  flock -u 8
  launch_table cluster
fi

if has allreduce; then
  load "before allreduce"
  for ((r = 0; r < ROUNDS; r++)); do
    "$HOROVODRUN" --gloo -np 2 -H localhost:2 "$PY" bench/torch_allreduce.py --impl horovod "$MIN" "$MAX" |
      sed -n 's/^\[0\]<stdout>://p' >>"$OUT/ar.horovod"
    "$HVDRUN" -np 2 "$PY" bench/torch_allreduce.py --impl hvdrun "$MIN" "$MAX" |
      sed -n 's/^\[0\]<stdout>://p' >>"$OUT/ar.hvdrun"
    if [ "$HOROVOD_FLAG" = 1 ]; then
      "$HVDRUN" --horovod -np 2 "$PY" bench/torch_allreduce.py --impl horovod "$MIN" "$MAX" |
        sed -n 's/^\[0\]<stdout>://p' >>"$OUT/ar.hvdrun-horovod"
    fi
  done
  load "after allreduce"
  "$PY" - "$OUT" <<'PY'
import collections, os, statistics, sys
d = sys.argv[1]
def load(name):
    bw, us = collections.defaultdict(list), collections.defaultdict(list)
    p = os.path.join(d, name)
    if os.path.exists(p):
        for line in open(p):
            f = line.split()
            bw[int(f[0])].append(float(f[1]))
            us[int(f[0])].append(float(f[2]))
    return {s: statistics.median(v) for s, v in bw.items()}, {s: statistics.median(v) for s, v in us.items()}
h, v, hh = load("ar.horovod"), load("ar.hvdrun"), load("ar.hvdrun-horovod")
if not h[0] or not v[0]:
    sys.exit("bench-vs-horovod: an allreduce run printed nothing")
print("\nallreduce, float32 sum of torch tensors, 2 ranks on this host: busbw GB/s (median over rounds)")
print(f"{'bytes':>10} {'Horovod':>9} {'hvdrun.torch':>13} {'ratio':>7} {'Horovod us':>11} {'hvdrun us':>10}"
      + (f" {'Horovod under hvdrun':>21}" if hh[0] else ""))
for s in sorted(h[0]):
    line = f"{s:>10} {h[0][s]:9.3f} {v[0].get(s, float('nan')):13.3f} {v[0].get(s, float('nan')) / h[0][s]:7.2f}" \
           f" {h[1][s]:11.1f} {v[1].get(s, float('nan')):10.1f}"
    if hh[0]:
        line += f" {hh[0].get(s, float('nan')):21.3f}"
    print(line)
print("(ratio = hvdrun.torch / Horovod busbw; both with their default settings)")
PY
fi

if has step; then
  batch_of() { case $1 in example) echo 64 ;; mlp50m) echo 32 ;; resnet18) echo 16 ;; esac; }
  step_of() {  # tool model
    local cmd
    case $1 in
      horovodrun) cmd=("$HOROVODRUN" --gloo -np 2 -H localhost:2 "$PY" bench/torch_step.py --mode horovod) ;;
      hvdrun) cmd=("$HVDRUN" -np 2 "$PY" bench/torch_step.py --mode hvd) ;;
      hvdrun-horovod) cmd=("$HVDRUN" --horovod -np 2 "$PY" bench/torch_step.py --mode horovod) ;;
    esac
    "${cmd[@]}" --model "$2" --batch "$(batch_of "$2")" --steps "$STEPS" --warmup 2 | sed -n 's/^\[0\]<stdout>:RESULT //p'
  }
  load "before step"
  tools="horovodrun hvdrun"
  [ "$HOROVOD_FLAG" = 1 ] && tools+=" hvdrun-horovod"
  for ((r = 0; r < ROUNDS; r++)); do
    for m in $MODELS; do
      for tool in $tools; do
        line=$(step_of "$tool" "$m")
        [ -n "$line" ] || { echo "bench-vs-horovod: step $m under $tool produced no result"; exit 1; }
        echo "$tool $line" >>"$OUT/step"
      done
    done
  done
  load "after step"
  "$PY" - "$OUT/step" <<'PY'
import collections, statistics, sys
t, meta = collections.defaultdict(list), {}
for line in open(sys.argv[1]):
    tool, mode, model, params, batch, median, _ = line.split()
    t[(model, tool)].append(float(median))
    meta[model] = (int(params), int(batch))
print("\ntraining step, 2 ranks, median step ms (median over rounds); speed-up = horovodrun's time / the tool's")
print(f"{'model':<8} {'params':>9} {'batch':>5} {'Horovod (horovodrun)':>21} {'hvdrun.torch':>13} {'speed-up':>9}"
      f" {'Horovod (hvdrun --horovod)':>27} {'speed-up':>9}")
for model, (params, batch) in meta.items():
    h, v = statistics.median(t[(model, "horovodrun")]), statistics.median(t[(model, "hvdrun")])
    hh = t.get((model, "hvdrun-horovod"))
    extra = f" {statistics.median(hh):27.1f} {h / statistics.median(hh):8.2f}x" if hh else ""
    print(f"{model:<8} {params:>9} {batch:>5} {h:21.1f} {v:13.1f} {h / v:8.2f}x{extra}")
PY
fi
