#!/usr/bin/env bash
# `make bench`: run every benchmark and write BENCHMARKS.md with the figures and the
# command that produced each. Benchmarks are never timed unit tests: the machines are
# shared and noisy, so ratios are measured side by side in one run.
set -o errexit -o pipefail -o nounset
cd "$(dirname "$0")/.."
PY=.venv/bin/python
out=BENCHMARKS.md
tmp=$(mktemp)

# What the tests need, the benchmarks need too (perf_analyzer links against libb64).
bash scripts/ensure_system_packages.sh
$PY scripts/install_perf_analyzer.py >/dev/null
$PY scripts/install_plotly_basic.py --offline-ok >/dev/null

{
  echo "# Benchmarks"
  echo
  echo "Written by \`make bench\` on $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GiB."
  # Machines differ from session to session: a CPU-bound reference lets runs be compared.
  echo "CPU: $(awk -F': ' '/model name/{print $2; exit}' /proc/cpuinfo); a 10-million-step pure-Python loop took $($PY -c 'import time
t = time.perf_counter()
s = 0
for i in range(10_000_000): s += i
print(f"{time.perf_counter() - t:.2f}")') s (figures scale with it)."
  echo "Each section names the command that produced it; rerun it to check a figure."
  echo
} >"$tmp"

run() {
  echo "Running: $*" >&2
  {
    echo "## \`$*\`"
    echo
    "$@"
    echo
  } >>"$tmp"
}

run $PY benchmarks/bench_config.py
run $PY benchmarks/bench_repository.py --models 500
run $PY benchmarks/bench_engine.py --models add_batched,busy_compute,add_sub --levels 1,2,4,8 --window-ms 1000 --rounds 5 --rate-fractions 0.3,0.5
# Live events of a streaming sweep (its windows carry more), 10 viewers: #19's target.
run $PY benchmarks/bench_live.py --model stream_tok --streaming --viewers 10
for extra in benchmarks/bench_*.py; do
  case "$extra" in
    # bench_gpu.py runs on a lent GPU machine, through scripts/gpu_check.sh.
    benchmarks/bench_config.py|benchmarks/bench_repository.py|benchmarks/bench_engine.py|benchmarks/bench_gpu.py) ;;
    *) run $PY "$extra" ;;
  esac
done
{
  echo "## GPU check: \`bash scripts/gpu_check.sh\` on a lent GPU machine"
  echo
  if [ -f benchmarks/gpu/RESULTS.md ]; then
    cat benchmarks/gpu/RESULTS.md
  else
    echo "Not run yet: no session has had a GPU machine. The script, its model and the bundle"
    echo "it carries are ready (see README, \"The GPU check\"); its output goes to"
    echo "benchmarks/gpu/RESULTS.md, which this section then shows."
  fi
  echo
} >>"$tmp"
# Hand runs (side by side with another tree, say) are not rerun here: what follows the
# first "## Hand runs" heading of the old file is kept below the new figures.
if [ -f "$out" ]; then
  awk '/^## Hand runs/{keep=1} keep' "$out" >>"$tmp"
fi
mv "$tmp" "$out"
echo "Wrote $out"
