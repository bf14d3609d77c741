#!/usr/bin/env bash
# Sets everything up (scripts/setup.sh), then runs the whole test suite: the C++
# tests, the ONNX backend conformance suites (Debian's libonnx-testdata and the
# one the installed onnx package builds) and the Python tests.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh

echo "== C++ tests"
(cd build && ctest --output-on-failure -j2 | tail -n 3)

conformance() {  # name, folder, [options]: full report in build/, failures and the summary here
  local log="build/conformance-$1.txt"
  if build/onnxtrain conformance "$2" "${@:3}" >"$log"; then status=0; else status=$?; fi
  grep -E '^FAIL ' "$log" || true
  echo "$1: $(tail -n 1 "$log")   (skips and their reasons: $log)"
  return "$status"
}
echo "== ONNX conformance"
conformance libonnx-testdata /usr/share/libonnx-testdata/data/node --skip-list tests/conformance/libonnx-testdata-1.12.skip
.venv/bin/python tests/conformance/write_onnx_suite.py build/onnx-node-suite
conformance "onnx-$(.venv/bin/python -c 'import onnx; print(onnx.__version__)')" build/onnx-node-suite --skip-list tests/conformance/onnx-node-suite.skip

echo "== Python tests"
.venv/bin/python -m pytest -q -p no:cacheprovider
