#!/usr/bin/env bash
# Every libFuzzer target (tests/fuzz, clang, ASan + UBSan), each for a fixed time from its
# checked-in seed corpus (tests/fuzz/corpus/NAME) and its regressions. New inputs go to a
# scratch directory, never into the checked-in corpus. A crash stops the run with the
# input saved as build-fuzz/crash-*: add it to tests/fuzz/regressions/NAME/ with the fix
# (the fuzz_replay.NAME ctest runs it in every build from then on).
#   HVDRUN_FUZZ_SECONDS  seconds per target (default 12; the rendezvous server twice that)
set -euo pipefail
cd "$(dirname "$0")/.."
targets=(frame_fuzzer host_list_fuzzer hostfile_fuzzer env_spec_fuzzer agent_wire_fuzzer rendezvous_server_fuzzer
         horovod_store_fuzzer config_file_fuzzer launch_command_fuzzer cycle_message_fuzzer slurm_env_fuzzer)
build=() start=$SECONDS
for t in "${targets[@]}"; do build+=(--target "$t"); done
CC=clang CXX=clang++ BUILD_DIR=build-fuzz BUILD_TYPE=RelWithDebInfo scripts/build.sh -DHVDRUN_BUILD_FUZZ=ON \
  -DHVDRUN_BUILD_BENCH=OFF "${build[@]}" >/dev/null
echo "fuzz.sh: built the targets in $((SECONDS - start)) s"
secs=${HVDRUN_FUZZ_SECONDS:-12}
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
export LSAN_OPTIONS=suppressions=$PWD/tests/fuzz/lsan.supp
for t in "${targets[@]}"; do
  budget=$secs
  [ "$t" = rendezvous_server_fuzzer ] && budget=$((secs * 2))
  scratch=$(mktemp -d)
  seeds=(tests/fuzz/corpus/$t)
  [ -d tests/fuzz/regressions/$t ] && seeds+=(tests/fuzz/regressions/$t)
  if ! (cd build-fuzz && tests/$t -max_total_time="$budget" -timeout=10 -rss_limit_mb=4096 -print_final_stats=1 \
        "$scratch" "${seeds[@]/#/../}" >"$scratch.log" 2>&1); then
    tail -40 "$scratch.log"
    rm -rf "$scratch" "$scratch.log"
    echo "fuzz.sh: $t failed"
    exit 1
  fi
  echo "fuzz.sh: $t: $(grep -o 'stat::number_of_executed_units: [0-9]*' "$scratch.log" | grep -o '[0-9]*$') runs in ${budget} s, no crash"
  rm -rf "$scratch" "$scratch.log"
done
