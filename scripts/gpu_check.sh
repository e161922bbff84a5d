#!/usr/bin/env bash
# The GPU check (issue 6): the built-in engine and perf_analyzer side by side against a
# real tritonserver on the lent GPU, on a torch MLP, with and without dynamic batching.
#
# Prepare here:  .venv/bin/python scripts/gpu_bundle.py        (var/gpu/bundle.tar.xz, ~43 MiB)
# On the device: bash scripts/gpu_check.sh                      (carry var/gpu/bundle.tar.xz)
# Rehearse on a CPU-only machine, same path end to end (numpy model, KIND_CPU, short run):
#   .venv/bin/python scripts/gpu_bundle.py --python-version 3.11 --out var/gpu/bundle-3.11.tar.xz
#   bash scripts/gpu_check.sh --rehearse
# Writes $OUT/gpu_check.md (the tables for BENCHMARKS.md), triton.log and nvidia-smi.txt;
# $OUT is the device tool's output folder, var/gpu/out here.
# Knobs (environment): LEVELS, WINDOW_MS, CONFIGS (plain,batched,batched3), ROUNDS.
set -o errexit -o pipefail -o nounset
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/var/gpu/out}"
mkdir -p "$OUT"

if [ "${1:-}" = "--rehearse" ]; then
  PY="${GPU_PYTHON:-$PWD/.venv/bin/python}"
  BUNDLE="${BUNDLE:-var/gpu/bundle-3.11.tar.xz}"
  KIND=CPU STUB_HOME="${STUB_PYTHONHOME:-}" LEVELS="${LEVELS:-1,2}" WINDOW_MS="${WINDOW_MS:-500}"
else
  # The device's own Python (3.12, torch, numpy); its stub needs PYTHONHOME=/usr
  # (../shared/gpu/README.md).
  PY="${GPU_PYTHON:-/opt/torch/.venv/bin/python}"
  BUNDLE="${BUNDLE:-var/gpu/bundle.tar.xz}"
  KIND=GPU STUB_HOME="${STUB_PYTHONHOME:-/usr}" LEVELS="${LEVELS:-1,8,32,64}" WINDOW_MS="${WINDOW_MS:-2000}"
fi
CONFIGS="${CONFIGS:-plain,batched}"
ROUNDS="${ROUNDS:-1}"
[ -f "$BUNDLE" ] || { echo "no $BUNDLE: build it with scripts/gpu_bundle.py" >&2; exit 2; }

B="$(mktemp -d /tmp/gpu-bundle.XXXXXX)"
# Python's tarfile rather than tar -J: the device image may lack xz.
"$PY" -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2], filter="tar")' "$BUNDLE" "$B"
SITE_PACKAGES="$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
{ nvidia-smi 2>&1 || echo "nvidia-smi: not available"; } >"$OUT/nvidia-smi.txt"

read -r HTTP GRPC METRICS < <("$PY" - <<'PY'
import socket
socks = [socket.socket() for _ in range(3)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in socks))
PY
)

# tritonserver from the bundle; model.py imports numpy (and torch) from the device's Python.
(
  export LD_LIBRARY_PATH="$B/site/nvidia_pytriton.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export PYTHONPATH="$SITE_PACKAGES" PATH="$(dirname "$PY"):$PATH"
  if [ -n "$STUB_HOME" ]; then export PYTHONHOME="$STUB_HOME"; fi
  exec "$B/site/pytriton/tritonserver/bin/tritonserver" \
    --model-repository="$PWD/benchmarks/gpu/model_repository" \
    --backend-directory="$B/triton_backends" --model-control-mode=explicit \
    --http-address=127.0.0.1 --grpc-address=127.0.0.1 --metrics-address=127.0.0.1 \
    --http-port="$HTTP" --grpc-port="$GRPC" --metrics-port="$METRICS" --log-verbose=0 --exit-timeout-secs=5
) >"$OUT/triton.log" 2>&1 &
TRITON=$!
cleanup() { kill "$TRITON" 2>/dev/null || true; wait "$TRITON" 2>/dev/null || true; rm -rf "$B"; }
trap cleanup EXIT

"$PY" - "$HTTP" <<'PY' || { echo "tritonserver did not start:" >&2; tail -20 "$OUT/triton.log" >&2; exit 1; }
import sys, time, urllib.request
url = f"http://127.0.0.1:{sys.argv[1]}/v2/health/live"
for _ in range(240):
    try:
        urllib.request.urlopen(url, timeout=1)
        sys.exit(0)
    except OSError:
        time.sleep(0.5)
sys.exit(1)
PY

PERF_ANALYZER="$B/perf_analyzer/perf_analyzer" PYTHONPATH="$B/site:$PWD" \
  "$PY" benchmarks/bench_gpu.py --url "127.0.0.1:$GRPC" \
  --metrics-url "http://127.0.0.1:$METRICS/metrics" --kind "$KIND" --levels "$LEVELS" \
  --window-ms "$WINDOW_MS" --configs "$CONFIGS" --rounds "$ROUNDS" | tee "$OUT/gpu_check.md"
