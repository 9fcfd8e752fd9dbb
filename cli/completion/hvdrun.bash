# bash completion for hvdrun (installed as share/bash-completion/completions/hvdrun).
# The options, their values' types and their choices are read from `hvdrun --help` itself,
# once per shell and hvdrun binary: this file cannot fall behind the program's flags.

declare -gA _hvdrun_type=()  # option -> its value's type from --help ("" for a flag)
declare -g _hvdrun_for=""    # the hvdrun binary the table was read from

# Fills _hvdrun_type from `$1 --help`: lines "  -x,--name TYPE   description"; horovodrun's
# single-dash spellings named in a description as "(-np N)" or "(-cb)" too.
_hvdrun_load() {
  [[ $_hvdrun_for == "$1" && ${#_hvdrun_type[@]} -gt 0 ]] && return
  _hvdrun_type=() _hvdrun_for=$1
  local line names type name alias re='^  (-[^ ]+)( ([^ ]+( x [0-9]+)?))?' alias_re='\((-[a-z]+)[ )]'
  while IFS= read -r line; do
    [[ $line =~ $re ]] || continue
    names=${BASH_REMATCH[1]} type=${BASH_REMATCH[3]}
    for name in ${names//,/ }; do _hvdrun_type[$name]=$type; done
    [[ $line =~ $alias_re ]] && _hvdrun_type[${BASH_REMATCH[1]}]=$type
  done < <("$1" --help 2>/dev/null)
}

# COMPREPLY for the value of an option whose type is $1, the word so far $2.
_hvdrun_value() {
  local type=$1 cur=$2
  case $type in
    *:\{*\}) local choices=${type#*:\{}; choices=${choices%\}}
             COMPREPLY=($(compgen -W "${choices//,/ }" -- "$cur")) ;;
    FILE|PATH) compopt -o filenames 2>/dev/null; COMPREPLY=($(compgen -f -- "$cur")) ;;
    DIR) compopt -o filenames 2>/dev/null; COMPREPLY=($(compgen -d -- "$cur")) ;;
    LEVEL) COMPREPLY=($(compgen -W "trace debug info warn error critical off" -- "$cur")) ;;
    LIST) COMPREPLY=($(compgen -A hostname -- "$cur")) ;;
    IFACE*) COMPREPLY=($(compgen -W "$(ls /sys/class/net 2>/dev/null)" -- "$cur")) ;;
    NAME*) COMPREPLY=($(compgen -e -- "$cur")) ;;
    CMD) COMPREPLY=($(compgen -c -- "$cur")) ;;
    *) COMPREPLY=() ;;
  esac
}

_hvdrun() {
  local cur=${COMP_WORDS[COMP_CWORD]} i=1 w type
  _hvdrun_load "${COMP_WORDS[0]}"
  # Walk the options before the command: each option and its value ("--opt VALUE", or
  # "--opt = VALUE" where readline splits at '=').
  while ((i < COMP_CWORD)); do
    w=${COMP_WORDS[i]}
    [[ $w == -* ]] || break  # the command
    ((i++))
    [[ $w == -- ]] && break
    [[ -v _hvdrun_type[$w] ]] || continue  # not an option of --help (e.g. -xNAME=1)
    type=${_hvdrun_type[$w]}
    [[ -z $type ]] && continue  # a flag
    [[ ${COMP_WORDS[i]} == = ]] && ((i++))
    if ((i == COMP_CWORD)); then _hvdrun_value "${type%% x *}" "$cur"; return; fi
    [[ $type == *" x "* ]] && ((i += ${type##* x } - 1))  # an option of several values
    ((i++))
  done
  if ((i < COMP_CWORD)); then  # the command's own arguments
    if declare -F _command_offset >/dev/null; then _command_offset "$i"; else compopt -o default 2>/dev/null; COMPREPLY=(); fi
  elif [[ $cur == -* && ${COMP_WORDS[i - 1]} != -- ]]; then
    COMPREPLY=($(compgen -W "${!_hvdrun_type[*]}" -- "$cur"))
  else  # the command
    compopt -o filenames 2>/dev/null
    COMPREPLY=($(compgen -c -- "$cur") $(compgen -f -X '!*/*' -- "$cur"))
  fi
}
complete -F _hvdrun hvdrun
