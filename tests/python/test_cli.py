"""The onnxtrain CLI as a user runs it: inspect, run, train, and clear errors for bad input."""

import os
import re
import subprocess

import numpy as np
import onnx
import pytest
import torch
from onnx import numpy_helper

from export_util import export_training
from models import MLP, WithLoss

CLI = os.path.join(os.path.dirname(__file__), "..", "..", "build", "onnxtrain")


def cli(*args):
    return subprocess.run([CLI, *map(str, args)], capture_output=True, text=True)


@pytest.fixture(scope="module")
def mlp(tmp_path_factory):
    torch.manual_seed(0)
    d = tmp_path_factory.mktemp("mlp")
    module = WithLoss(MLP()).train()
    path = export_training(module, (torch.randn(2, 16), torch.randint(0, 10, (2,))), str(d / "mlp.onnx"),
                           ["x", "target"], {"x": {0: "batch"}, "target": {0: "batch"}}, ["loss"])
    return path, d


def test_inspect_shows_symbolic_inputs_ops_and_parameters(mlp):
    path, _ = mlp
    r = cli("inspect", path)
    assert r.returncode == 0, r.stderr
    assert "x: float32[batch, 16]" in r.stdout
    assert re.search(r"SoftmaxCrossEntropyLoss: 1 \[cpu( cuda)?\]", r.stdout)
    assert "parameters: 6 tensors, 1930 elements, 7720 bytes" in r.stdout


def test_run_reads_and_writes_tensor_protos(mlp):
    path, d = mlp
    x, t = np.random.default_rng(0).standard_normal((3, 16)).astype(np.float32), np.array([1, 2, 3])
    (d / "x.pb").write_bytes(numpy_helper.from_array(x, "x").SerializeToString())
    (d / "t.pb").write_bytes(numpy_helper.from_array(t, "target").SerializeToString())
    r = cli("run", path, "-i", f"x={d / 'x.pb'}", "-i", f"target={d / 't.pb'}", "-o", d / "out")
    assert r.returncode == 0, r.stderr
    loss = numpy_helper.to_array(onnx.load_tensor(str(d / "out" / "output_0.pb")))
    assert loss.shape == () and np.isfinite(loss)


def test_train_prints_falling_loss_and_memory(mlp):
    path, _ = mlp
    r = cli("train", path, "--loss", "loss", "--dims", "batch=8", "--steps", "6", "--int-range", "0,10", "--lr", "0.05")
    assert r.returncode == 0, r.stderr
    rows = [line.split() for line in r.stdout.splitlines() if line.strip() and line.split()[0].isdigit()]
    assert len(rows) == 6
    losses = [float(row[1]) for row in rows]
    assert losses[-1] < losses[0]
    assert "peak MiB" in r.stdout


@pytest.mark.parametrize("args,message", [
    (["--dims", "batch=zero"], "--dims: 'batch=zero' is not NAME=POSITIVE_INTEGER"),
    (["--dims", "batch=4", "--steps", "0"], "--steps must be positive"),
    (["--dims", "batch=4", "--int-range", "5,1"], "--int-range: '5,1' is not LOW,HIGH"),
    (["--steps", "2"], "needs the size of batch: give it with --dims"),
    (["--dims", "batch=4", "--optimizer", "lamb"], "lamb not in {adamw,sgd}"),
    (["--dims", "batch=4", "--device", "gpu"], "device 'gpu': expected cpu, cuda or cuda:N"),
])
def test_train_rejects_bad_options_clearly(mlp, args, message):
    path, _ = mlp
    r = cli("train", path, "--loss", "loss", *args)
    assert r.returncode != 0
    assert message in r.stderr + r.stdout


def test_conformance_on_a_device_this_machine_lacks_is_a_clear_error(tmp_path):
    r = cli("conformance", "--device", "gpu", tmp_path)
    assert r.returncode == 1 and "device 'gpu': expected cpu, cuda or cuda:N" in r.stderr
    r = cli("conformance", "--device", "cuda:7", tmp_path)
    assert r.returncode == 1 and "cuda:7" in r.stderr, r.stderr


def test_missing_and_corrupt_models_are_errors_not_crashes(tmp_path):
    r = cli("inspect", tmp_path / "none.onnx")
    assert r.returncode == 1 and "does not exist" in r.stderr
    (tmp_path / "bad.onnx").write_bytes(b"\x0a\xff\xff garbage")
    r = cli("run", tmp_path / "bad.onnx")
    assert r.returncode == 1 and "not a valid ONNX model" in r.stderr


def test_plan_reports_clusters_prediction_and_largest_batch(tmp_path):
    torch.manual_seed(0)
    from models import GPT
    module = WithLoss(GPT(vocab=65, dim=32, heads=4, layers=2, block=32)).train()
    idx = torch.randint(0, 65, (2, 8))
    path = export_training(module, (idx, idx), str(tmp_path / "gpt.onnx"), ["idx", "target"],
                           {"idx": {0: "batch", 1: "seq"}, "target": {0: "batch", 1: "seq"}}, ["loss"])
    r = cli("plan", path, "--loss", "loss", "--dims", "batch=8,seq=32", "--budget", "0.5", "--limit", "64MiB",
            "--max-dim", "batch", "--json", tmp_path / "plan.json")
    assert r.returncode == 0, r.stderr
    assert "Gelu+ | [batch, seq, 128]" in r.stdout
    assert "budget 50% of the stash" in r.stdout and "missed" not in r.stdout
    assert "predicted without plans: step peak" in r.stdout and "predicted with plans:" in r.stdout
    largest = re.search(r"largest batch whose step fits in 64MiB \(AdamW\): level 0: (\d+); level 1: (\d+); "
                        r"level 2: (\d+); these options: (\d+)", r.stdout)
    assert largest, r.stdout
    level0, level1, level2, budget = map(int, largest.groups())
    assert 0 < level0 < min(budget, level1) and level1 <= level2
    import json
    report = json.loads((tmp_path / "plan.json").read_text())
    assert report["clusters"] and report["predicted_after"]["total"] < report["predicted_before"]["total"]
    assert report["predicted_before"]["optimizer_state"] == 2 * report["predicted_before"]["parameters"]
    # A budget on the whole step's peak, met, and the predicted timeline drawn without running anything.
    r = cli("plan", path, "--loss", "loss", "--dims", "batch=8,seq=32", "--level", "2", "--json", tmp_path / "l2.json")
    layered = json.loads((tmp_path / "l2.json").read_text())["predicted_after"]["total"]
    want = (report["predicted_before"]["total"] + layered) // 2
    r = cli("plan", path, "--loss", "loss", "--dims", "batch=8,seq=32", "--budget", f"{want}B", "--json",
            tmp_path / "peak.json", "--plot", tmp_path / "timeline.png")
    assert r.returncode == 0, r.stderr
    assert json.loads((tmp_path / "peak.json").read_text())["predicted_after"]["total"] <= want
    png = (tmp_path / "timeline.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 10000
    timeline = json.loads((tmp_path / "timeline.json").read_text())
    assert timeline["source"] == "predicted" and len(timeline["steps"]) > timeline["boundary"] > 0
    r = cli("plan", path, "--loss", "loss", "--dims", "batch=8,seq=32", "--config", "Gelu+:7:1")
    assert r.returncode == 1 and "memory config entry 'Gelu+:7:1'" in r.stderr
    r = cli("plan", path, "--loss", "loss", "--dims", "batch=8", "--budget", "0.5")
    assert r.returncode == 1 and "needs dims that were not given" in r.stderr


def test_train_takes_the_memory_optimizer_options(tmp_path):
    torch.manual_seed(0)
    from models import GPT
    module = WithLoss(GPT(vocab=65, dim=32, heads=4, layers=2, block=32)).train()
    idx = torch.randint(0, 65, (2, 8))
    path = export_training(module, (idx, idx), str(tmp_path / "gpt.onnx"), ["idx", "target"],
                           {"idx": {0: "batch", 1: "seq"}, "target": {0: "batch", 1: "seq"}}, ["loss"])
    args = ("train", path, "--loss", "loss", "--dims", "batch=4,seq=16", "--steps", "3", "--int-range", "0,65")
    plain, layered = cli(*args), cli(*args, "--level", "1")
    assert plain.returncode == 0 and layered.returncode == 0, layered.stderr
    assert "level 1: 2 transformer layers" in layered.stdout
    stash = lambda out: [float(l.split()[-1])  # noqa: E731
                         for l in out.splitlines() if l.strip() and l.split()[0].isdigit()]
    losses = lambda out: [l.split()[1] for l in out.splitlines() if l.strip() and l.split()[0].isdigit()]  # noqa: E731
    assert stash(layered.stdout)[-1] < stash(plain.stdout)[-1]
    assert losses(layered.stdout) == losses(plain.stdout), "recompute changes no number"
