#!/usr/bin/env bash
# The GPU checks, for a machine with an NVIDIA GPU, nvcc, cmake, ninja and PyTorch but neither Debian's packages
# nor internet (the device tool's machines). Usage: scripts/device_check.sh DEBS OUT [CHECKS], where DEBS holds the
# build's Debian packages (apt-get download: see docs/cuda.md), OUT receives the logs, and CHECKS (all by default)
# names which checks run after the build, in this order: cpp (the C++ CUDA tests, each in a process of its own; a
# failing one again on the first attention and GEMM kernels), pytest (the CUDA pytest, against PyTorch on CUDA),
# attention (bench/gpu_attention.py), example (the example trained on the GPU in float32 and bf16 autocast, and in
# PyTorch eager for comparison), conformance (the ONNX node suites on the GPU against the CPU kernels), memcheck
# (compute-sanitizer over the GPU tests' nodes and an MLP's training steps). The packages are unpacked under
# /opt/deb; the build (library, C++ tests, CLI, Python extension) goes to /tmp/gb, and a second call on the same
# machine rebuilds nothing.
set -uo pipefail
debs=$1
out=$2
only=${3:-all}  # which checks, comma-separated: cpp,pytest,attention,example,conformance,memcheck (the build always)
want() { [ "$only" = all ] || [[ ",$only," == *",$1,"* ]]; }
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
step build 330 ninja -C /tmp/gb onnxtrain_tests onnxtrain _onnxtrain
# Each GPU test in a process of its own (a kernel's fault ends its process's CUDA context, not the other tests'),
# the launches synchronous so that a fault names its kernel; a failing test again with the attention and the
# products on their first kernels (warp-per-row attention, the tiled GEMM), which says whether the newer ones failed.
if want cpp; then
  tests=$(/tmp/gb/onnxtrain_tests --gtest_list_tests --gtest_filter='Cuda*:SecondDevice*:Allocator*' |
    awk '/^[^ ]/ {suite = $1} /^  / {print suite $1}')
  for t in $tests; do
    if ! step "cpp_$t" 60 env CUDA_LAUNCH_BLOCKING=1 /tmp/gb/onnxtrain_tests --gtest_filter="$t"; then
      step "cpp_${t}_simple" 60 env CUDA_LAUNCH_BLOCKING=1 ONNXTRAIN_CUDA_ATTENTION=simple ONNXTRAIN_CUDA_GEMM=tiled \
        /tmp/gb/onnxtrain_tests --gtest_filter="$t"
    fi
  done
fi
mkdir -p /tmp/pkg && cp -r python/onnxtrain /tmp/pkg/ && cp /tmp/gb/_onnxtrain*.so /tmp/pkg/onnxtrain/
want pytest && step pytest_cuda 300 env PYTHONPATH=/tmp/pkg "$py" -m pytest -q -p no:cacheprovider --tb=short -rA \
  tests/python/test_cuda.py tests/python/test_cuda_optim.py
want attention && step attention 150 env PYTHONPATH=/tmp/pkg "$py" bench/gpu_attention.py --steps 10 &&
  tail -6 "$out/attention.log"
if want example; then
  step example 150 env PYTHONPATH=/tmp/pkg "$py" examples/train_gpt.py --steps 40 --device cuda
  step example_bf16 150 env PYTHONPATH=/tmp/pkg "$py" examples/train_gpt.py --steps 40 --device cuda --bf16
  step example_eager 150 env PYTHONPATH=/tmp/pkg "$py" examples/train_gpt.py --steps 40 --device cuda --eager
fi
if want conformance; then
  step conformance 150 /tmp/gb/onnxtrain conformance --device cuda -v /opt/deb/usr/include/onnx/backend/test/data/node
  grep -c ^PASS "$out/conformance.log" | sed 's/^/conformance passes: /' | tee -a "$out/summary.txt"
fi
want memcheck && step memcheck 150 compute-sanitizer --tool memcheck --error-exitcode 9 /tmp/gb/onnxtrain_tests \
  --gtest_filter='Cuda.AnMlpTrainsAsOnTheCpu:Cuda.DropoutDrawsTheCpusMask:Cuda.FlashAttention*:Cuda.TrainingGraph*:'\
'Cuda.TheLlama*:Cuda.ProductsThroughCublasLt*:Cuda.TheFusedHeadComputes*:Cuda.TensorCoreAttention*:'\
'Cuda.ElementIndexing*:Cuda.NodesCompute*'
