# Sourced by testenv/up, node-up, down and node-down: the processes they start and stop, each in
# its own session with stdio on $procs/logs/<name>.log, recorded as "name pid binary" lines in
# $procs/pids. Callers set `procs` (the directory) and, for wait_for, `timeout` and a `fail`
# function.

# start <name> [VAR=value...] <binary> <args...>: leading assignments are the process's
# environment.
start() {
  local name=$1; shift
  local -a envs=()
  while [[ $1 == *=* ]]; do envs+=("$1"); shift; done
  setsid env "${envs[@]}" bash -c 'echo "$$" >"$0"; exec "$@"' "$procs/$name.pid" "$@" \
    </dev/null >"$procs/logs/$name.log" 2>&1 &
  local i
  for i in $(seq 50); do [[ -s $procs/$name.pid ]] && break; sleep 0.02; done
  echo "$name $(cat "$procs/$name.pid") $(readlink -f "$1")" >>"$procs/pids"
  rm -f "$procs/$name.pid"
}

alive() { # <name>
  local pid
  pid=$(awk -v n="$1" '$1 == n { print $2 }' "$procs/pids")
  [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null
}

wait_for() { # <name> <description> <command...>
  local name=$1 what=$2; shift 2
  local deadline=$((SECONDS + timeout))
  until "$@" >/dev/null 2>&1; do
    alive "$name" || fail "$name exited while waiting for $what"
    ((SECONDS < deadline)) || fail "timed out after ${timeout}s waiting for $what"
    sleep 0.2
  done
}

# is_ours <pid> <binary>: the pid still runs the binary that was started (so a recycled pid is
# never signalled).
is_ours() {
  local exe
  exe=$(readlink "/proc/$1/exe" 2>/dev/null) || return 1
  [[ $exe == "$2" || $exe == "$2 (deleted)" ]]
}
