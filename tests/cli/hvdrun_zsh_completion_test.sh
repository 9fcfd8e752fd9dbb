#!/usr/bin/env bash
# cli/completion/_hvdrun (zsh) against the real hvdrun: the _arguments specs it makes from
# `hvdrun --help` name every option of --help (and horovodrun's -np, -cb), nothing else, and
# give each value the action of its type, as the bash completion does (hvdrun_completion_test.sh).
# Usage: hvdrun_zsh_completion_test.sh HVDRUN ZSH COMPLETION_FILE (exit 77: no zsh, skipped)
set -uo pipefail
HVDRUN=$1 ZSH=$2 FILE=$3
[ -x "$ZSH" ] || { echo "SKIPPED: no zsh ($ZSH; scripts/install-deps.sh installs it)"; exit 77; }
fails=0
check() {  # check WHAT EXPECTED ACTUAL
  if [ "$2" = "$3" ]; then echo "ok: $1"; else
    echo "FAIL: $1"; diff <(echo "$2") <(echo "$3") | head -20; fails=$((fails + 1)); fi
}
# The specs, one a line: the completion run in zsh with _arguments replaced by a printer.
specs=$(timeout 30 "$ZSH" -f -c '_arguments() { print -rl -- "$@"; }; words=("$1" ""); source "$2"' \
  zsh "$HVDRUN" "$FILE") || { echo "FAIL: zsh could not run $FILE"; exit 1; }
spec() { grep -F -- "*$1" <<<"$specs" | grep -E "^\*$1[=+]?\[" | head -1; }

# Every option name in --help (short and long), found as the bash completion's test finds them.
help_opts=$("$HVDRUN" --help | grep -oE '^  -[^ ]+' | tr ',' '\n' | tr -d ' ' | sort -u)
[ "$(wc -l <<<"$help_opts")" -gt 60 ] || { echo "FAIL: --help lists too few options"; exit 1; }
spec_opts=$(grep -E '^\*-' <<<"$specs" | sed -E 's/^\*(-[^=+[]+).*/\1/' | sort -u)
check "every option of --help, -np and -cb, nothing else" "$(printf '%s\n' $help_opts -np -cb | sort -u)" "$spec_opts"
check "a flag takes no value" "*--dry-run[Print the plan, one JSON object per rank, and start nothing]" "$(spec --dry-run)"
check "choices from --help" "(slurm ssh local command)" "$(spec --launcher | awk -F: '{print $NF}')"
check "a FILE value: files" "_files" "$(spec --hostfile | awk -F: '{print $NF}')"
check "a short option's value: attached or the next word" "_hosts" "$(spec -H | grep -F '*-H+[' | awk -F: '{print $NF}')"
check "-np: as --num-proc" "$(spec --num-proc | sed 's/^[^]]*]//')" "$(spec -np | sed 's/^[^]]*]//')"
check "log levels" "(trace debug info warn error critical off)" "$(spec --log-level | awk -F: '{print $NF}')"
check "two values of a two-value option" "2" "$(spec --blacklist-cooldown-range | grep -o ':TEXT:' | wc -l)"
check "-x: exported parameters" '_parameters -g "*export*"' "$(spec -x | awk -F: '{print $NF}')"
check "then the command and its own arguments" "(-):command:_command_names -e
*::arguments:_normal" "$(tail -2 <<<"$specs")"
((fails == 0)) || { echo "$fails check(s) failed"; exit 1; }
echo "all zsh completion checks passed"
