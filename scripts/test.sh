#!/usr/bin/env bash
# Sets everything up (scripts/setup.sh), then runs the whole test suite: the C++
# tests, the ONNX backend conformance suites (Debian's libonnx-testdata: node,
# pytorch-converted and pytorch-operator; and the one the installed onnx package
# builds; their single-op tests also in bfloat16 and float16) and the Python
# tests; then, built with clang under AddressSanitizer and
# UndefinedBehaviorSanitizer, the C++ tests, the conformance suites, the fuzz
# targets' saved regressions and a short, repeatable fuzzing run of each target
# (ONNXTRAIN_FUZZ_RUNS inputs each from the seeds with a fixed libFuzzer seed,
# 60000 by default: scripts/fuzz.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
section() { echo "== $* [${SECONDS} s]"; }  # (the seconds since the start: where the suite's time goes)
bash scripts/setup.sh

# The sanitized build (the last stage's) needs nothing but the set-up: it compiles in the background, scheduled
# only where a core would idle (SCHED_IDLE), as the Python tests keep about one of two cores busy. They slow beside it
# (846 s against 548 s alone on 2 cores: the cores share caches and memory bandwidth), but the build is done when
# they end: 846 s for both against 918 s one after the other (at nice 10 instead of SCHED_IDLE, their OpenMP regions
# waited on it: 966 s). Its output goes to build-sanitize/build.log, printed where it fails; a failure above stops it.
mkdir -p build-sanitize
chrt --idle 0 setsid bash scripts/sanitize-build.sh >build-sanitize/build.log 2>&1 &
sanitize_build=$!
trap 'kill -- -"$sanitize_build" 2>/dev/null || true' EXIT

section "C++ tests"
(cd build && ctest --output-on-failure -j2 | tail -n 3)

conformance() {  # name, folder, [options]: full report in build/, failures and the summary here
  local log="build/conformance-$1.txt"
  if build/onnxtrain conformance "$2" "${@:3}" >"$log"; then status=0; else status=$?; fi
  grep -E '^FAIL ' "$log" || true
  echo "$1: $(tail -n 1 "$log")   (skips and their reasons: $log)"
  return "$status"
}
section "ONNX conformance"
conformance libonnx-testdata /usr/share/libonnx-testdata/data/node --skip-list tests/conformance/libonnx-testdata-1.12.skip
.venv/bin/python tests/conformance/write_onnx_suite.py build/onnx-node-suite
onnx_suite="onnx-$(.venv/bin/python -c 'import onnx; print(onnx.__version__)')"
conformance "$onnx_suite" build/onnx-node-suite --skip-list tests/conformance/onnx-node-suite.skip
section "Modules PyTorch exported at opsets 6 and 12 (legacy semantics: PRelu's per-channel slope before opset 7)"
conformance libonnx-testdata-pytorch-converted /usr/share/libonnx-testdata/data/pytorch-converted
conformance libonnx-testdata-pytorch-operator /usr/share/libonnx-testdata/data/pytorch-operator
section "Each single-op test in bfloat16 and float16 against float32 (per-op tests of the low-precision kernels)"
conformance "$onnx_suite-bfloat16" build/onnx-node-suite --as bfloat16
conformance libonnx-testdata-bfloat16 /usr/share/libonnx-testdata/data/node --as bfloat16
conformance "$onnx_suite-float16" build/onnx-node-suite --as float16
section "The same on the path of a CPU without AVX-512 (ONNXTRAIN_CPU_DISABLE=avx512)"
ONNXTRAIN_CPU_DISABLE=avx512 conformance "$onnx_suite-bfloat16-no-avx512" build/onnx-node-suite --as bfloat16

section "Python tests"
.venv/bin/python -m pytest -q -p no:cacheprovider --durations=10

section "Under AddressSanitizer and UndefinedBehaviorSanitizer (clang, build-sanitize/): the C++ tests, the conformance"
echo "   suites, then each fuzz target's saved regressions and a short fuzzing run (scripts/fuzz.sh)"
wait "$sanitize_build" || { cat build-sanitize/build.log; exit 1; }
echo "   (the sanitized build, from the background: done [${SECONDS} s])"
(cd build-sanitize && ctest --output-on-failure -j2 | tail -n 3)
export OMP_NUM_THREADS=1 UBSAN_OPTIONS=print_stacktrace=1
sanitized() {  # name, folder, [options]
  local log="build-sanitize/conformance-$1.txt"
  if build-sanitize/onnxtrain conformance "$2" "${@:3}" >"$log" 2>&1; then status=0; else status=$?; fi
  grep -E '^FAIL |ERROR|runtime error' "$log" || true
  echo "$1 (sanitized): $(tail -n 1 "$log")"
  return "$status"
}
sanitized libonnx-testdata /usr/share/libonnx-testdata/data/node \
  --skip-list tests/conformance/libonnx-testdata-1.12.skip
sanitized "$onnx_suite" build/onnx-node-suite --skip-list tests/conformance/onnx-node-suite.skip
sanitized "$onnx_suite-bfloat16" build/onnx-node-suite --as bfloat16
ONNXTRAIN_FUZZ_RUNS=${ONNXTRAIN_FUZZ_RUNS:-60000} bash scripts/fuzz.sh
section "All passed"
