#!/usr/bin/env bash
# Sets everything up (scripts/setup.sh), then runs the main job: the bundled GPT
# example exported from PyTorch and run by onnxtrain, with its memory plan.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/python examples/run_gpt.py "$@"
