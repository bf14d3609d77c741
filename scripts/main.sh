#!/usr/bin/env bash
# Sets everything up (scripts/setup.sh), then runs the main job: the bundled character-level GPT,
# trained with onnxtrain.Module on the license texts of the machine, then sampled.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/python examples/train_gpt.py "$@"
