#!/usr/bin/env bash
# After a build of only some targets (the sanitizer builds of scripts/test.sh build
# tests_runtime_process_cluster, tests/CMakeLists.txt): fails when a test of LABELS lacks
# what it runs. Every test that the full build REF lists under LABELS must be listed in
# BUILD too (a gtest binary that was not built lists none of its tests), and every file of
# BUILD that a test command under LABELS runs or names must exist.
# Usage: scripts/check-test-targets.sh REF_BUILD BUILD LABELS
set -euo pipefail
ref=$(realpath "$1") build=$(realpath "$2") labels=$3
tests_of() { (cd "$1" && ctest -N -L "$labels") | sed -n 's/^ *Test *#[0-9]*: //p' | sort -u; }
fail=0
missing=$(comm -23 <(tests_of "$ref") <(tests_of "$build"))
if [ -n "$missing" ]; then
  echo "check-test-targets: $build lacks $(wc -l <<<"$missing") test(s) of '$labels' that $ref has, e.g.:"
  head -5 <<<"$missing"
  fail=1
fi
commands=$(cd "$build" && ctest -N -V -L "$labels" | sed -n 's/^[0-9]*: Test command: *//p')
# ctest shows no command for a test whose executable is not there.
if grep -qx '' <<<"$commands"; then
  echo "check-test-targets: $(grep -cx '' <<<"$commands") test(s) of '$labels' in $build have no executable"
  fail=1
fi
files=$(grep -oE "$build/[^ \"]+" <<<"$commands" | sort -u || true)
for f in $files; do
  [ -e "$f" ] || { echo "check-test-targets: a test of '$labels' runs $f, which was not built"; fail=1; }
done
if ((fail)); then
  echo "check-test-targets: add the test's binary to tests_runtime_process_cluster (tests/CMakeLists.txt)"
  exit 1
fi
echo "check-test-targets: $(tests_of "$build" | wc -l) tests of '$labels', $(wc -w <<<"$files") binaries, all built"
