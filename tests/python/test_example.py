"""The main job's example, examples/train_gpt.py, for a few steps of a small GPT: in float32 and under bf16
autocast its loss falls and the last step's measured peak equals the prediction made before the first step."""

import os
import re
import subprocess
import sys

import pytest

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "train_gpt.py")


@pytest.mark.parametrize("precision", [[], ["--bf16"]])
def test_example_trains_and_predicts_its_peak(precision):
    out = subprocess.run([sys.executable, EXAMPLE, "--steps", "6", "--batch", "4", "--block", "32", "--dim", "32",
                          "--layers", "2", *precision], capture_output=True, text=True, check=True).stdout
    first, last = map(float, re.search(r"loss ([\d.]+) -> ([\d.]+)", out).groups())
    assert last < first
    peaks = r"peak ([\d.]+) MiB measured by the allocator, ([\d.]+) MiB predicted"
    measured, predicted = re.search(peaks, out).groups()
    assert measured == predicted
    assert ("bf16 autocast" in out) == bool(precision)
