# Sourced by testenv/up, node-up, down, node-down and restart: the processes they start and
# stop, each in its own session with stdio on $procs/logs/<name>.log, recorded as
# "name pid binary" lines in $procs/pids. Callers set `procs` (the directory) and, for
# wait_for, `timeout` and a `fail` function.
#
# `start` also writes what testenv/restart needs to start the same process again after a
# SIGKILL: its argument vector and its whole environment (NUL-separated, so any byte but NUL
# survives) in $procs/cmd/<name>.argv and .environ, and `healthy` writes the check that says
# it is up in .health.

# start <name> [VAR=value...] <binary> <args...>: leading assignments are the process's
# environment, added to this shell's.
start() {
  local name=$1; shift
  local -a envs=()
  while [[ $1 == *=* ]]; do envs+=("$1"); shift; done
  mkdir -p "$procs/cmd"
  # The environment may hold the caller's secrets: the files are the owner's only.
  (
    umask 077
    printf '%s\0' "$@" >"$procs/cmd/$name.argv"
    env "${envs[@]}" env -0 >"$procs/cmd/$name.environ"
  )
  : >"$procs/logs/$name.log"
  launch "$name"
  echo "$name $pid $(readlink -f "$1")" >>"$procs/pids"
}

# launch <name>: starts what `start` recorded for <name>, with exactly that environment
# (`env -i`), in a session of its own, appending to its log; sets `pid`. The one way both
# `start` and testenv/restart run a process, so a restarted one is the same.
launch() {
  local name=$1
  local -a argv=() environ=()
  mapfile -d '' -t argv <"$procs/cmd/$name.argv"
  mapfile -d '' -t environ <"$procs/cmd/$name.environ"
  rm -f "$procs/$name.pid"
  setsid env -i "${environ[@]}" "$BASH" -c 'echo "$$" >"$0"; exec "$@"' "$procs/$name.pid" \
    "${argv[@]}" </dev/null >>"$procs/logs/$name.log" 2>&1 &
  local i
  for i in $(seq 50); do [[ -s $procs/$name.pid ]] && break; sleep 0.02; done
  pid=$(cat "$procs/$name.pid")
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

# healthy <name> <description> <command...>: records the command as <name>'s health check
# (for testenv/restart), then waits for it like wait_for.
healthy() {
  local name=$1 what=$2; shift 2
  (
    umask 077
    printf '%s\0' "$what" "$@" >"$procs/cmd/$name.health"
  )
  wait_for "$name" "$what" "$@"
}

# A health check's request: here, so that testenv/restart runs the same one.
curl_ok() { curl -fsS --max-time 2 "$@"; }

# gone <pid>: every thread of the process has exited, so the descriptors it held (its
# listening sockets) are closed. Not is_ours: /proc/<pid>/exe goes with the memory, before
# the descriptors, and the threads of a killed multi-threaded process exit one by one; a new
# process started then fails to bind the old one's ports. A zombie waiting for its parent is
# gone.
gone() {
  local task state
  for task in "/proc/$1/task"/*; do
    [[ -e $task/stat ]] || continue
    state=$(sed 's/.*) //' "$task/stat" 2>/dev/null | cut -d' ' -f1) || continue
    [[ -z $state || $state == Z || $state == X ]] || return 1
  done
  return 0
}

# is_ours <pid> <binary>: the pid still runs the binary that was started (so a recycled pid is
# never signalled).
is_ours() {
  local exe
  exe=$(readlink "/proc/$1/exe" 2>/dev/null) || return 1
  [[ $exe == "$2" || $exe == "$2 (deleted)" ]]
}
