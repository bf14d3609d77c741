#!/usr/bin/env bash
# The GPU checks, for a machine with an NVIDIA GPU, nvcc, cmake, ninja and PyTorch but neither Debian's packages
# nor internet (the device tool's machines). Usage: scripts/device_check.sh DEBS OUT [CHECKS [SECONDS]], where DEBS
# holds the build's Debian packages (apt-get download: see docs/cuda.md), OUT receives the logs, CHECKS (all by
# default) names the checks to run after the build, in the order given, and SECONDS (from the script's start) is
# when the last one must end: a check's time limit is cut to what is left, and a check with under 10 s left is
# skipped. The checks: cpp (the C++ CUDA tests, each in a process of its own; a failing one again on the first
# attention and GEMM kernels), pytest (the CUDA pytest, against PyTorch on CUDA), bench (bench/gpu.py, each
# configuration alone: GPT-2 124M, bf16 and float32, beside eager and torch.compile; BENCH_ONLY, where set, names
# the configurations), headline (bench/gpu.py --headline: onnxtrain-bf16, then twice eager-bf16's batch under the
# memory fraction where eager-bf16 just fits its own), attention (bench/gpu_attention.py; ATTENTION_ARGS, where set,
# its options), profile (bench/gpu_profile.py: where a GPT-2 and a Llama bf16 step's time goes; PROFILE_MODELS,
# where set, names the models), host (bench/gpu_profile.py --host: the host's time a GPT-2 bf16 step by op type, the
# kernels queued as in training; not among the defaults),
# example (the example trained on the GPU in float32 and bf16 autocast, and in PyTorch eager for comparison),
# conformance (the ONNX node suites on the GPU against the CPU kernels), memcheck (compute-sanitizer over the GPU
# tests' nodes and an MLP's training steps; racecheck and synccheck over the tiled attentions), ncu (Nsight
# Compute over one forward and backward of the tiled attention at GPT-2's shape, --dtype fp32 in ATTENTION_ARGS for the
# float32 one: throughput, occupancy, stalls and their reasons, issue slots and instructions executed, shared
# memory's bank conflicts). The packages are unpacked under /opt/deb; the build (library, C++ tests, CLI, Python
# extension) goes to /tmp/gb, and a second call on the same machine rebuilds nothing.
set -uo pipefail
debs=$1
out=$2
only=${3:-cpp,pytest,bench,headline,attention,profile,example,conformance,memcheck,ncu}
deadline=${4:-100000}
mkdir -p /opt/deb "$out"
for f in "$debs"/*.deb; do dpkg -x "$f" /opt/deb; done
ln -sf /lib/x86_64-linux-gnu/libz.so.1 /opt/deb/usr/lib/x86_64-linux-gnu/libz.so  # Debian's link is absolute
lib=/opt/deb/usr/lib/x86_64-linux-gnu
export LD_LIBRARY_PATH=$lib:$lib/openblas-openmp:${LD_LIBRARY_PATH:-}
export PATH=/opt/deb/usr/bin:$PATH
py=$(command -v python3)
# cuBLASLt for the C++ tests and the CLI (the Python package finds the nvidia-cublas wheel's itself).
ONNXTRAIN_CUBLASLT=$("$py" -c "import glob, nvidia, os
libs = sorted(f for p in nvidia.__path__ for f in glob.glob(os.path.join(p, 'cu*', 'lib', 'libcublasLt.so.*')))
print(libs[0] if libs else '')")
export ONNXTRAIN_CUBLASLT
echo "cuBLASLt: $ONNXTRAIN_CUBLASLT" | tee -a "$out/summary.txt"
nvidia-smi -L | tee "$out/gpu.txt"
step() {  # step NAME SECONDS COMMAND...: runs it with a time limit, its output to OUT/NAME.log; its exit status
  local name=$1 limit=$2
  shift 2
  local left=$((deadline - SECONDS))
  if [ "$left" -lt 10 ]; then
    echo "$name: skipped, out of time" | tee -a "$out/summary.txt"
    return 124
  fi
  [ "$left" -lt "$limit" ] && limit=$left
  local t0=$SECONDS
  timeout "$limit" "$@" >"$out/$name.log" 2>&1
  local rc=$?
  echo "$name: exit $rc in $((SECONDS - t0)) s" | tee -a "$out/summary.txt"
  [ "$rc" = 0 ] || tail -4 "$out/$name.log"  # (the end of a failure's log shown)
  return "$rc"
}
step configure 120 cmake -S . -B /tmp/gb -G Ninja -DCMAKE_PREFIX_PATH=/opt/deb/usr \
  -DCMAKE_CXX_FLAGS="-isystem /opt/deb/usr/include" -DONNXTRAIN_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DONNXTRAIN_BUILD_PYTHON=ON -DPython_EXECUTABLE="$py" -Dpybind11_DIR="$($py -m pybind11 --cmakedir)"
step build 330 ninja -C /tmp/gb onnxtrain_tests onnxtrain _onnxtrain || exit 1
mkdir -p /tmp/pkg && cp -r python/onnxtrain /tmp/pkg/ && cp /tmp/gb/_onnxtrain*.so /tmp/pkg/onnxtrain/
export PYTHONPATH=/tmp/pkg

# Each GPU test in a process of its own (a kernel's fault ends its process's CUDA context, not the other tests'), four
# at a time, the launches synchronous so that a fault names its kernel; a failing test again with the attention and
# the products on their first kernels (warp-per-row attention, the tiled GEMM), which says whether the newer ones
# failed.
cpp_test() {
  step "cpp_$1" 60 env CUDA_LAUNCH_BLOCKING=1 /tmp/gb/onnxtrain_tests --gtest_filter="$1" ||
    step "cpp_$1_simple" 60 env CUDA_LAUNCH_BLOCKING=1 ONNXTRAIN_CUDA_ATTENTION=simple ONNXTRAIN_CUDA_GEMM=tiled \
      /tmp/gb/onnxtrain_tests --gtest_filter="$1"
}
check_cpp() {
  local t
  for t in $(/tmp/gb/onnxtrain_tests --gtest_list_tests --gtest_filter='Cuda*:SecondDevice*:Allocator*' |
    awk '/^[^ ]/ {suite = $1} /^  / {print suite $1}'); do
    cpp_test "$t" &
    while [ "$(jobs -rp | wc -l)" -ge 4 ]; do sleep 0.2; done
  done
  wait
}
check_pytest() {  # (four processes, and a test stopped after 120 s, where pytest-xdist and pytest-timeout are)
  local opts=()
  "$py" -c "import pytest_timeout" 2>/dev/null && opts=(--timeout=120)
  "$py" -c "import xdist" 2>/dev/null && opts+=(-n 4)
  step pytest_cuda 300 "$py" -m pytest -q -p no:cacheprovider --tb=short -rA --durations=8 "${opts[@]}" \
    tests/python/test_cuda.py tests/python/test_cuda_optim.py
  grep -E '^(FAILED|ERROR)|passed|failed' "$out/pytest_cuda.log" | tail -25 >>"$out/summary.txt"
}
check_bench() {  # one configuration a process and a call, so that each one's figures survive a later one's end
  local c
  for c in ${BENCH_ONLY:-eager-bf16 onnxtrain-bf16 compile-bf16 eager onnxtrain-l0 onnxtrain-l1-bf16}; do
    step "bench_$c" 100 "$py" bench/gpu.py --steps 3 --only "$c" && tail -1 "$out/bench_$c.log" >>"$out/summary.txt"
  done
}
check_headline() {
  step headline 240 "$py" bench/gpu.py --steps 3 --only onnxtrain-bf16 --headline &&
    grep -A8 -E '^onnxtrain-bf16|^headline' "$out/headline.log" >>"$out/summary.txt"
}
check_attention() {
  # shellcheck disable=SC2086  # (the options as words)
  step attention 150 "$py" bench/gpu_attention.py --steps 10 ${ATTENTION_ARGS:-} &&
    tail -6 "$out/attention.log" >>"$out/summary.txt"
}
check_host() {
  step host_gpt2 120 "$py" bench/gpu_profile.py --host --top 25 && sed -n '/op types a step/,/^$/p' \
    "$out/host_gpt2.log" >>"$out/summary.txt"
}
check_profile() {
  local m
  for m in ${PROFILE_MODELS:-gpt2 llama}; do
    if [ "$m" = llama ]; then
      step profile_llama 120 "$py" bench/gpu_profile.py --model llama --batch 8
    else
      step profile_gpt2 120 "$py" bench/gpu_profile.py
    fi
  done
}
check_example() {
  step example 150 "$py" examples/train_gpt.py --steps 40 --device cuda
  step example_bf16 150 "$py" examples/train_gpt.py --steps 40 --device cuda --bf16
  step example_eager 150 "$py" examples/train_gpt.py --steps 40 --device cuda --eager
}
check_conformance() {
  step conformance 150 /tmp/gb/onnxtrain conformance --device cuda -v /opt/deb/usr/include/onnx/backend/test/data/node
  grep -c ^PASS "$out/conformance.log" | sed 's/^/conformance passes: /' | tee -a "$out/summary.txt"
}
check_memcheck() {
  step memcheck 150 compute-sanitizer --tool memcheck --error-exitcode 9 /tmp/gb/onnxtrain_tests \
    --gtest_filter='Cuda.AnMlpTrainsAsOnTheCpu:Cuda.DropoutDrawsTheCpusMask:Cuda.FlashAttention*:Cuda.TrainingGraph*:'\
'Cuda.TheLlama*:Cuda.ProductsThroughCublasLt*:Cuda.TheFusedHeadComputes*:Cuda.TensorCoreAttention*:'\
'Cuda.TiledAttention*:Cuda.Float32Attention*:Cuda.ElementIndexing*:Cuda.NodesCompute*'
  # the tiled attentions' staging: shared memory read and written between barriers
  for tool in racecheck synccheck; do
    step "$tool" 90 compute-sanitizer --tool "$tool" --error-exitcode 9 /tmp/gb/onnxtrain_tests \
      --gtest_filter='Cuda.TensorCoreAttention*:Cuda.TiledAttention*:Cuda.Float32Attention*'
  done
}
check_ncu() {  # (the forward and backward kernels: the first call's skipped, the second's profiled; ATTENTION_ARGS
  # as the bench's)
  # shellcheck disable=SC2086  # (the options as words)
  step ncu_attention 150 ncu --kernel-name-base demangled --kernel-name 'regex:mma_attention::(forward|grad)(<|_f32)' \
    --launch-skip 2 --launch-count 2 --section SpeedOfLight --section Occupancy --section LaunchStats \
    --section WarpStateStats --section SchedulerStats --section InstructionStats --section ComputeWorkloadAnalysis \
    --section MemoryWorkloadAnalysis_Tables --print-details all \
    "$py" bench/gpu_attention.py --measure onnxtrain --steps 1 ${ATTENTION_ARGS:-}
}
for check in ${only//,/ }; do
  declare -F "check_$check" >/dev/null || { echo "unknown check: $check (see the usage above)"; exit 2; }
  "check_$check"
done
