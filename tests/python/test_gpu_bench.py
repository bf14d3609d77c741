"""bench/gpu.py, the GPU benchmark of record, runs end to end (a two-layer GPT-2 of GPT-2's vocabulary, on the GPU
where there is one, else the CPU): onnxtrain's step peak printed as predicted and as measured, equal. So does
bench/gpu_attention.py (attention alone; under is_causal, and under dropout and a mask tensor, also in float32),
onnxtrain's graph holding the fused attention, and bench/gpu_profile.py (where a step's time goes, or the host's
part of it), its op types timed and the graph's Casts counted."""
import os
import subprocess
import sys

import pytest

BENCH = os.path.join(os.path.dirname(__file__), "..", "..", "bench", "gpu.py")
ATTENTION = os.path.join(os.path.dirname(__file__), "..", "..", "bench", "gpu_attention.py")
PROFILE = os.path.join(os.path.dirname(__file__), "..", "..", "bench", "gpu_profile.py")


def test_the_gpu_benchmark_runs_and_prints_the_predicted_peak_as_measured():
    out = subprocess.run([sys.executable, BENCH, "--tiny", "--batch", "2", "--seq", "16", "--steps", "1", "--only",
                          "eager,onnxtrain-l1"], capture_output=True, text=True, check=True).stdout
    lines = {line.split()[0]: line.split() for line in out.splitlines() if line.startswith(("eager", "onnxtrain"))}
    assert set(lines) == {"eager", "onnxtrain-l1"}, out
    predicted, measured = lines["onnxtrain-l1"][-3:-1]
    assert float(predicted) > 0 and predicted == measured, out


@pytest.mark.parametrize("options", [[], ["--dropout", "0.1", "--mask", "tensor"],
                                     ["--dtype", "fp32", "--dropout", "0.1", "--mask", "tensor"]])
def test_the_attention_benchmark_runs_on_the_fused_attention(options):
    out = subprocess.run([sys.executable, ATTENTION, "--tiny", "--steps", "1", "--only", "eager,onnxtrain", *options],
                         capture_output=True, text=True, check=True).stdout
    lines = {line.split()[0]: line.split() for line in out.splitlines() if line.startswith(("eager", "onnxtrain"))}
    assert set(lines) == {"eager", "onnxtrain"}, out
    assert lines["onnxtrain"][-1] == "yes" and float(lines["onnxtrain"][1]) > 0, out


@pytest.mark.parametrize("options", [[], ["--host"]])
def test_the_profile_times_the_steps_op_types(options):
    out = subprocess.run([sys.executable, PROFILE, "--tiny", "--batch", "2", "--seq", "16", "--steps", "1", "--top",
                          "100", *options], capture_output=True, text=True, check=True).stdout
    assert ("the host's time" in out.splitlines()[0]) == bool(options), out
    ops = {line.split()[0]: line.split()[1:] for line in out.splitlines()[2:] if len(line.split()) == 4}
    for op in ("FlashAttention", "FlashAttentionGrad", "LinearCrossEntropy", "Gemm"):
        assert op in ops and float(ops[op][0]) > 0 and float(ops[op][1]) >= 1, out
        assert float(ops[op][2]) > 0, out  # (us a call)
    assert "torch.profiler" in out, out
    casts = out.split("the training graph's Casts")[-1].splitlines()[1:]  # (autocast's: bf16 under --tiny's config)
    assert any(line.split()[2:3] == ["bfloat16"] and int(line.split()[0]) > 0 for line in casts if line.strip()), out
