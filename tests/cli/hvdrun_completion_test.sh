#!/usr/bin/env bash
# cli/completion/hvdrun.bash against the real hvdrun: every option `hvdrun --help` lists is
# offered (and nothing else), option values complete by their type, and the command's own
# words are left to the command. Usage: hvdrun_completion_test.sh HVDRUN COMPLETION_FILE
set -uo pipefail
HVDRUN=$1
source "$2"
fails=0
check() {  # check WHAT EXPECTED ACTUAL: equal as sorted word lists
  local want got
  want=$(tr ' ' '\n' <<<"$2" | sed '/^$/d' | sort -u) got=$(tr ' ' '\n' <<<"$3" | sed '/^$/d' | sort -u)
  if [ "$want" = "$got" ]; then echo "ok: $1"; else
    echo "FAIL: $1"; diff <(echo "$want") <(echo "$got") | head -20; fails=$((fails + 1)); fi
}
complete_line() {  # the words offered for the command line $@ (the last word being typed)
  COMP_WORDS=("$HVDRUN" "$@") COMP_CWORD=$# COMPREPLY=()
  _hvdrun
  echo "${COMPREPLY[*]}"
}

# Every option name in --help (short and long), found here independently of the completion's
# parser, and horovodrun's single-dash spellings that hvdrun rewrites.
help_opts=$("$HVDRUN" --help | grep -oE '^  -[^ ]+' | tr ',' '\n' | tr -d ' ')
[ "$(wc -l <<<"$help_opts")" -gt 60 ] || { echo "FAIL: --help lists too few options"; exit 1; }
check "every option of --help" "$help_opts -np -cb" "$(complete_line -)"
check "long options by prefix" "--ssh-port --ssh-identity-file --ssh-host-key-checking --ssh-command" \
  "$(complete_line -np 2 --ssh-)"
check "the pre-flight check's flags" "--check --check-build" "$(complete_line -H h1,h2 --check)"
check "--no-preflight" "--no-preflight" "$(complete_line -H h1,h2 --no-p)"
check "choices from --help" "slurm ssh" "$(complete_line --launcher s)"
check "choices after --opt=" "slurm ssh" "$(complete_line --launcher = s)"
check "NCCL's levels" "VERSION WARN INFO ABORT TRACE" "$(complete_line -H h1:2 --nccl-debug '')"
check "log levels" "warn" "$(complete_line --log-level w)"
check "--bind-to's choices" "core" "$(complete_line -np 2 --bind-to c)"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
touch "$dir/hosts.txt" "$dir/hostile"
check "a FILE value: files" "$dir/hosts.txt $dir/hostile" "$(complete_line -np 2 --hostfile "$dir/hos")"
check "values of a two-value option are skipped" "$dir/hosts.txt $dir/hostile" \
  "$(complete_line --blacklist-cooldown-range 1 2 -i "$dir/hos")"
check "-x: environment variable names" "HVDRUN_COMPLETION_TEST_VAR" \
  "$(HVDRUN_COMPLETION_TEST_VAR=1; export HVDRUN_COMPLETION_TEST_VAR; complete_line -x HVDRUN_COMPLETION_TEST_)"
check "the command: commands" "$(compgen -c -- hvdrun_completion | sort -u)" "$(complete_line -np 2 hvdrun_completion)"
got=$(complete_line -np 2 python3 -- --n)
check "the command's own options are not hvdrun's" "" "$(grep -o -- '--num-proc' <<<"$got")"
got=$(complete_line -np 2 -- --n)
check "after --: the command, not options" "" "$(grep -o -- '--num-proc' <<<"$got")"
((fails == 0)) || { echo "$fails check(s) failed"; exit 1; }
echo "all completion checks passed"
