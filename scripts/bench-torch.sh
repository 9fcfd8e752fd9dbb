#!/usr/bin/env bash
# Training step time on 2 ranks: hvdrun.torch's DistributedOptimizer against torch
# DistributedDataParallel on gloo, same model, batch, threads and machine, both launched by
# hvdrun (DDP through the env:// variables hvdrun sets), in one run. Models: the example's
# MLP (784-256-10), an MLP of about 50M parameters, and torchvision's ResNet-18 (Debian's
# python3-torchvision) on 64x64 images.
#
# Also the overlap: `local` (the same step without any communication, both ranks running)
# and `serial` (backward first, then every gradient allreduced, nothing overlapping) give
# the compute time C and the exposed allreduce time A = serial - local; with hvd's step H,
# the share of allreduce time hidden behind backward is (C + A - H) / A.
#
# Usage: scripts/bench-torch.sh [models...]   (default: example mlp50m resnet18)
#   BENCH_PYTHON (default /usr/bin/python3), BENCH_STEPS, BENCH_NP (default 2)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
PY=${BENCH_PYTHON:-/usr/bin/python3}
NP=${BENCH_NP:-2}
STEPS=${BENCH_STEPS:-10}
models=("$@")
((${#models[@]})) || models=(example mlp50m resnet18)
[ -x "$BUILD_DIR/cli/hvdrun" ] && [ -e "$BUILD_DIR/collectives/libhvdrun.so" ] || \
  scripts/build.sh --target hvdrun --target libhvdrun >/dev/null
export HVDRUN_LIBRARY=$PWD/$BUILD_DIR/collectives/libhvdrun.so
export PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH}
hvdrun=$BUILD_DIR/cli/hvdrun

batch_of() { case $1 in example) echo 64 ;; mlp50m) echo 32 ;; resnet18) echo 16 ;; esac; }
steps_of() { case $1 in resnet18) echo $((STEPS / 2 > 2 ? STEPS / 2 : 3)) ;; *) echo "$STEPS" ;; esac; }

declare -A ms
echo "bench-torch: $NP ranks on $(nproc) cores, $($PY -c 'import torch; print("torch", torch.__version__)'), $(date -u +%FT%TZ)"
for m in "${models[@]}"; do
  if [ "$m" = resnet18 ] && ! $PY -c 'import torchvision' 2>/dev/null; then
    echo "bench-torch: resnet18 skipped: torchvision is not importable by $PY (apt-get install python3-torchvision)"
    continue
  fi
  for mode in local serial hvd ddp; do
    line=$(timeout 900 "$hvdrun" -np "$NP" "$PY" bench/torch_step.py --mode "$mode" --model "$m" \
      --batch "$(batch_of "$m")" --steps "$(steps_of "$m")" --warmup 2 | sed -n 's/^\[0\]<stdout>:RESULT //p')
    [ -n "$line" ] || { echo "bench-torch: $m $mode produced no result"; exit 1; }
    read -r _ _ params batch median _ <<<"$line"
    echo "bench-torch: $m $mode: median step ${median} ms (params $params, batch $batch per rank)"
    ms[$m.$mode]=$median
    ms[$m.params]=$params
    ms[$m.batch]=$batch
  done
done

printf '\n%-9s %10s %6s %10s %10s %10s %10s %9s %9s\n' model params batch "local ms" "serial ms" "hvd ms" "ddp ms" \
  "ddp/hvd" "overlap"
for m in "${models[@]}"; do
  [ -n "${ms[$m.hvd]:-}" ] || continue
  awk -v m="$m" -v p="${ms[$m.params]}" -v b="${ms[$m.batch]}" -v c="${ms[$m.local]}" -v s="${ms[$m.serial]}" \
      -v h="${ms[$m.hvd]}" -v d="${ms[$m.ddp]}" 'BEGIN {
    a = s - c; ov = (a > 0) ? (c + a - h) / a : 0; if (ov < 0) ov = 0; if (ov > 1) ov = 1;
    printf "%-9s %10d %6d %10.1f %10.1f %10.1f %10.1f %8.2fx %8.0f%%\n", m, p, b, c, s, h, d, d / h, 100 * ov }'
done
echo "(median step time over ranks' medians; overlap = share of the exposed allreduce time (serial - local) hidden in hvd's step)"
