#!/usr/bin/env bash
# Sets up everything onnxtrain needs on a Debian machine: the system packages, a
# virtual environment (.venv) with the pinned Python packages, and the project
# itself installed into it with pip (its build compiles the C++ library, the
# extension, the CLI build/onnxtrain and the C++ tests into build/).
# Idempotent, and fast when nothing changed.
set -euo pipefail
cd "$(dirname "$0")/.."

apt_packages=(g++ protobuf-compiler libprotobuf-dev libopenblas-openmp-dev libgtest-dev
  nlohmann-json3-dev libcli11-dev zlib1g-dev libonnx-dev libonnx-testdata libdlpack-dev libdnnl-dev
  clang libclang-rt-14-dev libomp-14-dev)  # the last three: the sanitizer and fuzzing build (scripts/fuzz.sh)
missing=()
for p in "${apt_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing Debian packages: ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}" >/dev/null
fi

[ -x .venv/bin/python ] || python3 -m venv .venv
stamp=.venv/.requirements.sha256
want=$(sha256sum requirements.txt | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "setup: installing pinned Python packages (requirements.txt)"
  .venv/bin/pip install -q --disable-pip-version-check -r requirements.txt
  echo "$want" >"$stamp"
fi

# Where nvcc is (as CMake looks for it), the CUDA backend is built against cuBLASLt's header, from the nvidia-cublas
# wheel (PyTorch's CUDA wheels bring it; onnxtrain loads the library at run time).
if command -v nvcc >/dev/null || [ -x "${CUDA_HOME:-/nonexistent}/bin/nvcc" ] || [ -x /usr/local/cuda/bin/nvcc ]; then
  if ! .venv/bin/python -c "import glob, os, sys, nvidia
sys.exit(not any(glob.glob(os.path.join(p, 'cu*', 'include', 'cublasLt.h')) for p in nvidia.__path__))" 2>/dev/null; then
    echo "setup: installing nvidia-cublas (cuBLASLt, for the CUDA backend: requirements-cuda.txt)"
    .venv/bin/pip install -q --disable-pip-version-check --no-deps -r requirements-cuda.txt
  fi
fi

echo "setup: building and installing onnxtrain"
.venv/bin/pip install -q --disable-pip-version-check --no-build-isolation --no-deps .
