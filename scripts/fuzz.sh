#!/usr/bin/env bash
# Fuzzing (issue 15) with libFuzzer under AddressSanitizer and UndefinedBehaviorSanitizer. Builds the targets
# (scripts/sanitize-build.sh), replays the saved regressions (fuzz/regressions/TARGET/: every input that once
# crashed a target, kept after its fix), then fuzzes each target for SECONDS (default 60) from its seeds and the
# corpus earlier runs grew (build-sanitize/corpus/TARGET), the targets side by side (one a core), and prints per
# target the executions, the coverage reached and whether it crashed; a crashing input is left in
# build-sanitize/crashes/.
# Usage: scripts/fuzz.sh [SECONDS] [TARGET...]; targets: model training checkpoint memory_config.
# Repeatable runs (CI): ONNXTRAIN_FUZZ_RUNS=N runs exactly N inputs per target with libFuzzer's seed 1, from the
# seeds alone (a fresh corpus), so that a run is a function of the commit: CI repeats the inputs a green run tried,
# and an open-ended search for new bugs (a time-limited run) never fails an unrelated change.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
shift || true
targets=("$@")
((${#targets[@]})) || targets=(model training checkpoint memory_config)
bash scripts/sanitize-build.sh

# Seeds: the conformance suites' models, models exported from the test models, checkpoints of a trained session,
# memory configs and budgets.
seeds=build-sanitize/seeds
if [ ! -d "$seeds/model" ]; then
  mkdir -p "$seeds/model.tmp"
  suite=build/onnx-node-suite
  [ -d $suite ] || .venv/bin/python tests/conformance/write_onnx_suite.py $suite >/dev/null
  for d in /usr/share/libonnx-testdata/data/node/*/ $suite/*/; do
    [ -f "$d/model.onnx" ] && cp "$d/model.onnx" "$seeds/model.tmp/$(basename "$(dirname "$d")")-$(basename "$d").onnx"
  done
  .venv/bin/python fuzz/export_seed_models.py "$seeds/model.tmp"
  mv "$seeds/model.tmp" "$seeds/model"
fi
if [ ! -d "$seeds/checkpoint" ]; then
  mkdir -p "$seeds/checkpoint"
  ONNXTRAIN_FUZZ_WRITE_SEEDS="$seeds/checkpoint" build-sanitize/fuzz_checkpoint -runs=0 >/dev/null 2>&1
fi
seeds_of() {
  case $1 in
    model | training) echo "$seeds/model" ;;
    checkpoint) echo "$seeds/checkpoint" ;;
    memory_config) echo fuzz/seeds/memory_config ;;
  esac
}

export OMP_NUM_THREADS=1 UBSAN_OPTIONS=print_stacktrace=1 ASAN_OPTIONS=allocator_may_return_null=1
# Repeatable runs go without address randomization where the system allows it: hash tables keyed by pointers
# iterate in another order at other addresses, which changes the coverage a run sees and the inputs it keeps.
fixed_addresses=()
if [ -n "${ONNXTRAIN_FUZZ_RUNS:-}" ] && setarch "$(uname -m)" -R true 2>/dev/null; then
  fixed_addresses=(setarch "$(uname -m)" -R)
fi
mkdir -p build-sanitize/crashes
# One target: its saved regressions, then its run; a line of what it did into build-sanitize/fuzz-TARGET.verdict,
# whose first word is its status (0 passed).
fuzz_target() {
  local t=$1 bin=build-sanitize/fuzz_$1 log=build-sanitize/fuzz-$1.log verdict=build-sanitize/fuzz-$1.verdict
  if [ -d "fuzz/regressions/$t" ] && ! "$bin" fuzz/regressions/"$t"/* >"$log" 2>&1; then
    echo "1 fuzz $t: a saved regression crashes again (see $log)" >"$verdict"
    return
  fi
  local corpus=build-sanitize/corpus/$t
  local -a inputs=("$(seeds_of "$t")") limits=(-max_total_time="$seconds")
  if [ -n "${ONNXTRAIN_FUZZ_RUNS:-}" ]; then
    # The seeds listed in sorted order: libFuzzer reads a folder in the file system's order, which differs
    # between machines, and the order decides which inputs a run of N tries.
    corpus=build-sanitize/corpus-repeatable/$t limits=(-runs="$ONNXTRAIN_FUZZ_RUNS" -seed=1)
    rm -rf "$corpus"
    mkdir -p "$corpus"
    find -L "$(seeds_of "$t")" -type f | LC_ALL=C sort | paste -sd, >"$corpus.seeds"
    inputs=(-seed_inputs="@$corpus.seeds")
  fi
  mkdir -p "$corpus"
  local start=$SECONDS result="0" outcome="no crash"
  if ! "${fixed_addresses[@]}" "$bin" "$corpus" "${inputs[@]}" "${limits[@]}" -rss_limit_mb=4096 -timeout=30 \
    -print_final_stats=1 -artifact_prefix="build-sanitize/crashes/$t-" >"$log" 2>&1; then
    result=1 outcome="CRASHED: $(grep -o 'Test unit written to .*' "$log" | tail -n 1) (see $log)"
  fi
  local runs cov
  runs=$(grep -o 'number_of_executed_units: [0-9]*' "$log" | grep -o '[0-9]*$' || echo 0)
  cov=$(grep -oE 'cov: [0-9]+ ft: [0-9]+ corp: [0-9]+' "$log" | tail -n 1 || true)
  echo "$result fuzz $t: $runs executions in $((SECONDS - start)) s, ${cov:-no coverage line}; $outcome" >"$verdict"
}
# The targets run side by side, as many at once as there are cores (each is one thread), and report in order.
cores=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)  # (nproc counts OpenMP's limit, exported as 1 above)
for t in "${targets[@]}"; do
  rm -f "build-sanitize/fuzz-$t.verdict"
  while (($(jobs -rp | wc -l) >= cores)); do wait -n || true; done
  fuzz_target "$t" &
done
wait
status=0
for t in "${targets[@]}"; do
  result=1 line="fuzz $t: stopped before its verdict (see build-sanitize/fuzz-$t.log)"
  [ ! -f "build-sanitize/fuzz-$t.verdict" ] || read -r result line <"build-sanitize/fuzz-$t.verdict"
  echo "$line"
  [ "$result" = 0 ] || status=1
done
exit "$status"
