#!/usr/bin/env bash
# `make probe`: the hostile-Operator security probe against `make run` in production mode.
#
#   bash scripts/security_probe/run.sh [WORK]      (WORK: or PROBE_WORK; default var/probe/)
#
# Starts `make run` from this checkout with the environment of stack.py (DJANGO_DEBUG=false,
# a generated DJANGO_SECRET_KEY, VAR_DIR=WORK/var, Redis database 12, Triton on
# 18000-18002, web on 18080), waits for /healthz to report Triton up, runs probe.py (the
# table goes to WORK/probe.md and stdout, progress to stderr and WORK/probe.err), then
# stops the stack with one SIGTERM to its `python -m devstack` and checks that
# nothing of it is left. Exits non-zero when a row is not as expected, the stack did not
# come up, or something was left running. Each run starts from an empty WORK/var and an
# empty Redis database 12. Not part of `make test`.
set -o errexit -o pipefail -o nounset
cd "$(dirname "$0")/../.."
ROOT=$PWD
PY=$ROOT/.venv/bin/python
STACK="$PY $ROOT/scripts/security_probe/stack.py"
START_TIMEOUT_S=${PROBE_START_TIMEOUT_S:-600}
STOP_TIMEOUT_S=${PROBE_STOP_TIMEOUT_S:-120}

say() { echo "[probe] $*" >&2; }

make --no-print-directory install >/dev/null
WORK=$($PY -c 'import sys; sys.path.insert(0, "scripts/security_probe"); import stack; print(stack.work_dir(sys.argv[1] if len(sys.argv) > 1 else None))' "$@")
case "$WORK" in
  / | "$ROOT" | "$HOME") say "refusing work folder $WORK"; exit 2 ;;
esac

$STACK ports-free
# A fresh start: the stack's var, the last run's files, Redis database 12.
rm -rf "$WORK/var" "$WORK"/outside_* "$WORK/secret_key" "$WORK/tokens.json" \
  "$WORK/run.log" "$WORK/probe.md" "$WORK/probe.err"
mkdir -p "$WORK"
chmod 700 "$WORK"
$STACK flush-redis
[ -e .env ] && say "note: $ROOT/.env exists; make run reads the variables it sets that stack.py does not"
STACK_ENV=$($STACK env "$WORK")

make_pid=""
stopped=""
stop_stack() {
  [ -n "$stopped" ] && return 0
  stopped=1
  local status=0 devstack left
  if [ -n "$make_pid" ]; then
    if devstack=$($STACK devstack-pid "$WORK"); then
      devstack=${devstack%% *}
      say "stopping the stack: SIGTERM to devstack pid $devstack"
      # One signal to the devstack process only: it stops what it started. (A signal to the
      # whole process group leaves daphne and tritonserver running.)
      kill -TERM "$devstack" 2>/dev/null || true
      for _ in $(seq "$STOP_TIMEOUT_S"); do
        kill -0 "$devstack" 2>/dev/null || break
        sleep 1
      done
      if kill -0 "$devstack" 2>/dev/null; then
        say "devstack pid $devstack still running after ${STOP_TIMEOUT_S} s"
        status=1
      fi
    else
      say "no devstack process found (make run exited: see $WORK/run.log)"
    fi
  fi
  # What the devstack started (web, worker, tritonserver, its stubs) may take a moment to go.
  for _ in $(seq 30); do
    $STACK leftovers "$WORK" >/dev/null && break
    sleep 1
  done
  if ! left=$($STACK leftovers "$WORK"); then
    say "LEFT RUNNING after the stop:"
    echo "$left" >&2
    # Stop them (they are this run's), by pid, so the next run finds free ports.
    for pid in $(echo "$left" | awk '$1 ~ /^[0-9]+$/ {print $1}'); do kill -TERM "$pid" 2>/dev/null || true; done
    sleep 5
    for pid in $(echo "$left" | awk '$1 ~ /^[0-9]+$/ {print $1}'); do kill -KILL "$pid" 2>/dev/null || true; done
    status=1
  else
    say "stopped: nothing of the stack is left running, ports 18000-18002 and 18080 free"
  fi
  [ -n "$make_pid" ] && { wait "$make_pid" 2>/dev/null || true; }
  return $status
}
trap 'stop_stack || true' EXIT
trap 'exit 130' INT TERM

say "work folder $WORK; starting make run (log $WORK/run.log)"
# Only make and what it starts get the stack's environment (stack.py finds them by its VAR_DIR).
(eval "$STACK_ENV" && exec setsid make --no-print-directory run) >"$WORK/run.log" 2>&1 </dev/null &
make_pid=$!
if ! $STACK wait-healthy "$make_pid" "$START_TIMEOUT_S"; then
  tail -20 "$WORK/run.log" >&2 || true
  stop_stack || true
  exit 1
fi

probe_status=0
PROBE_WORK="$WORK" PROBE_RUN_LOG="$WORK/run.log" $PY scripts/security_probe/probe.py --out "$WORK/probe.md" 2> >(tee "$WORK/probe.err" >&2) || probe_status=$?

stop_status=0
stop_stack || stop_status=$?
if [ $probe_status -ne 0 ]; then
  say "FAILED: the probe exited $probe_status (rows not as expected are listed above; table in $WORK/probe.md)"
fi
if [ $stop_status -ne 0 ]; then
  say "FAILED: the stack did not stop cleanly"
fi
[ $probe_status -eq 0 ] && [ $stop_status -eq 0 ] && say "OK: every row as expected, nothing left running (table in $WORK/probe.md)"
[ $probe_status -eq 0 ] && [ $stop_status -eq 0 ]
