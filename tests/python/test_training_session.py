"""TrainingSession: training to a low loss, the loss curve of PyTorch's optimizers, gradient accumulation,
checkpoints (round trip, a crash mid-save, corrupt files), learning-rate schedule and inference export."""

import signal
import subprocess
import sys
import time

import numpy as np
import onnx
import pytest
import torch

import onnxtrain
from export_util import export_training
from models import GPT, MLP, WithLoss

AXES = {"idx": {0: "batch", 1: "seq"}, "target": {0: "batch", 1: "seq"}}


def gpt_model(tmp_path, seed=0, **kw):
    torch.manual_seed(seed)
    module = WithLoss(GPT(vocab=65, dim=32, heads=4, layers=2, block=32, **kw)).train()
    idx = torch.randint(0, 65, (4, 16))
    target = torch.roll(idx, -1, dims=1)
    path = export_training(module, (idx, target), str(tmp_path / "gpt.onnx"), ["idx", "target"], AXES, ["loss"])
    return module, path, {"idx": idx.numpy(), "target": target.numpy()}


def test_gpt_trains_to_a_tenth_of_its_loss_and_follows_pytorch_adamw(tmp_path):
    module, path, batch = gpt_model(tmp_path)
    session = onnxtrain.TrainingSession(path, "loss", onnxtrain.OptimizerOptions("adamw", lr=1e-2, weight_decay=0.01))
    torch_opt = torch.optim.AdamW(module.parameters(), lr=1e-2, weight_decay=0.01)
    ours, theirs = [], []
    for step in range(20):
        ours.append(session.train_step(batch))
        session.optimizer_step()
        session.lazy_reset_grad()
        torch_opt.zero_grad()
        loss = module(torch.from_numpy(batch["idx"]), torch.from_numpy(batch["target"]))
        loss.backward()
        torch_opt.step()
        theirs.append(loss.item())
    np.testing.assert_allclose(ours, theirs, rtol=1e-3)
    start = ours[0]
    for _ in range(200):
        loss = session.train_step(batch)
        session.optimizer_step()
        session.lazy_reset_grad()
        if loss < 0.1 * start:
            break
    assert loss < 0.1 * start, f"loss {loss:.3f} did not fall below a tenth of {start:.3f}"


@pytest.mark.parametrize("nesterov", [False, True])
def test_sgd_with_momentum_follows_pytorch(tmp_path, nesterov):
    module, path, batch = gpt_model(tmp_path)
    opt = onnxtrain.OptimizerOptions("sgd", lr=0.1, momentum=0.9, nesterov=nesterov, weight_decay=1e-3)
    session = onnxtrain.TrainingSession(path, "loss", opt)
    torch_opt = torch.optim.SGD(module.parameters(), lr=0.1, momentum=0.9, nesterov=nesterov, weight_decay=1e-3)
    for _ in range(8):
        ours = session.train_step(batch)
        session.optimizer_step()
        session.lazy_reset_grad()
        torch_opt.zero_grad()
        loss = module(torch.from_numpy(batch["idx"]), torch.from_numpy(batch["target"]))
        loss.backward()
        torch_opt.step()
        assert ours == pytest.approx(loss.item(), rel=1e-3)


def test_gradients_accumulate_until_reset(tmp_path):
    _, path, batch = gpt_model(tmp_path)
    name = "model.head.weight"

    def delta(accumulate):
        s = onnxtrain.TrainingSession(path, "loss", onnxtrain.OptimizerOptions("sgd", lr=0.1))
        before = s.parameter(name).copy()
        for _ in range(accumulate):
            s.train_step(batch)
        s.optimizer_step()
        return s.parameter(name) - before

    np.testing.assert_allclose(delta(2), 2 * delta(1), rtol=1e-4, atol=1e-7)  # float32 parameter differences


def test_session_options_reach_the_training_session(tmp_path):
    """SessionOptions (here the memory optimizer's level 1: layer-wise recompute) are the TrainingSession's: it
    stashes less, and its numbers do not change."""
    _, path, batch = gpt_model(tmp_path)

    def losses(options):
        s = onnxtrain.TrainingSession(path, "loss", onnxtrain.OptimizerOptions("adamw", lr=1e-2), options)
        out = []
        for _ in range(3):
            out.append(s.train_step(batch))
            s.optimizer_step()
            s.lazy_reset_grad()
        return out, s.last_stash_bytes

    (plain, stash), (recomputed, less) = losses(onnxtrain.SessionOptions()), losses(
        onnxtrain.SessionOptions(memory_level=1))
    assert recomputed == plain
    assert less < stash


def test_checkpoint_round_trip_resumes_identically(tmp_path):
    _, path, batch = gpt_model(tmp_path)
    ckpt = str(tmp_path / "run.ckpt")

    def steps(s, n):
        out = []
        for _ in range(n):
            out.append(s.train_step(batch))
            s.optimizer_step()
            s.lazy_reset_grad()
        return out

    a = onnxtrain.TrainingSession(path, "loss")
    steps(a, 3)
    a.save_checkpoint(ckpt)
    after_a = steps(a, 4)
    b = onnxtrain.TrainingSession(path, "loss")
    b.load_checkpoint(ckpt)
    assert b.step == 3
    assert steps(b, 4) == after_a


def test_corrupt_and_truncated_checkpoints_are_clear_errors(tmp_path):
    _, path, batch = gpt_model(tmp_path)
    s = onnxtrain.TrainingSession(path, "loss")
    s.train_step(batch)
    s.optimizer_step()
    ckpt = tmp_path / "c.ckpt"
    s.save_checkpoint(str(ckpt))
    data = ckpt.read_bytes()
    (tmp_path / "trunc.ckpt").write_bytes(data[: len(data) // 2])
    with pytest.raises(onnxtrain.CheckpointError, match="truncated"):
        s.load_checkpoint(str(tmp_path / "trunc.ckpt"))
    flipped = bytearray(data)
    flipped[-10] ^= 0xFF
    (tmp_path / "flip.ckpt").write_bytes(bytes(flipped))
    with pytest.raises(onnxtrain.CheckpointError, match="checksum"):
        s.load_checkpoint(str(tmp_path / "flip.ckpt"))
    (tmp_path / "junk.ckpt").write_bytes(b"not a checkpoint at all")
    with pytest.raises(onnxtrain.CheckpointError, match="bad magic"):
        s.load_checkpoint(str(tmp_path / "junk.ckpt"))
    with pytest.raises(onnxtrain.IoError):
        s.load_checkpoint(str(tmp_path / "missing.ckpt"))


SAVER = """
import sys, onnxtrain, numpy as np
s = onnxtrain.TrainingSession(sys.argv[1], "loss", onnxtrain.OptimizerOptions("sgd", lr=0.0))
s.save_checkpoint(sys.argv[2])
print("saved", flush=True)
while True:
    s.save_checkpoint(sys.argv[2])
"""


def test_a_crash_mid_save_leaves_the_previous_checkpoint_loadable(tmp_path):
    torch.manual_seed(0)
    big = WithLoss(MLP((256, 1024, 1024, 10))).train()  # ~5 MB of parameters: saves take a while
    path = export_training(big, (torch.randn(2, 256), torch.randint(0, 10, (2,))), str(tmp_path / "mlp.onnx"),
                           ["x", "target"], {"x": {0: "batch"}, "target": {0: "batch"}}, ["loss"])
    ckpt = str(tmp_path / "mlp.ckpt")
    proc = subprocess.Popen([sys.executable, "-c", SAVER, path, ckpt], stdout=subprocess.PIPE)
    assert proc.stdout.readline().strip() == b"saved"
    time.sleep(0.3)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    s = onnxtrain.TrainingSession(path, "loss", onnxtrain.OptimizerOptions("sgd", lr=0.0))
    s.load_checkpoint(ckpt)  # never a half-written file
    assert s.step == 0


def test_learning_rate_schedule_warms_up_and_decays(tmp_path):
    _, path, batch = gpt_model(tmp_path)
    s = onnxtrain.TrainingSession(path, "loss", onnxtrain.OptimizerOptions("sgd", lr=1.0))
    s.set_schedule(warmup_steps=2, total_steps=6, final_fraction=0.1)
    rates = []
    for _ in range(7):
        rates.append(s.learning_rate)
        s.train_step(batch)
        s.optimizer_step()
        s.lazy_reset_grad()
    np.testing.assert_allclose(rates, [0.5, 1.0, 1.0, 0.775, 0.55, 0.325, 0.1])


class LossAndLogits(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, idx, target):
        logits = self.model(idx)
        return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1)), logits


def test_exported_inference_model_matches_the_trained_module(tmp_path):
    torch.manual_seed(0)
    module = LossAndLogits(GPT(vocab=65, dim=32, heads=4, layers=2, block=32)).train()
    idx = torch.randint(0, 65, (4, 16))
    batch = {"idx": idx.numpy(), "target": torch.roll(idx, -1, dims=1).numpy()}
    path = export_training(module, (idx, torch.roll(idx, -1, dims=1)), str(tmp_path / "gpt.onnx"), ["idx", "target"],
                           AXES, ["loss", "logits"])
    s = onnxtrain.TrainingSession(path, "loss", onnxtrain.OptimizerOptions("adamw", lr=1e-2))
    for _ in range(3):
        s.train_step(batch)
        s.optimizer_step()
        s.lazy_reset_grad()
    out = str(tmp_path / "infer.onnx")
    s.export_model_for_inferencing(out)  # every output but the loss
    exported = onnx.load(out)
    assert [i.name for i in exported.graph.input] == ["idx"]
    assert [o.name for o in exported.graph.output] == ["logits"]
    with torch.no_grad():
        for name, p in module.named_parameters():
            p.copy_(torch.as_tensor(np.array(s.parameter(name))))
        want = module.model(idx).numpy()
    got = onnxtrain.Session(out).run({"idx": batch["idx"]})["logits"]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_batch_norm_running_statistics_move_as_onnx_says(tmp_path):
    """A training-mode BatchNormalization's running statistics are written back into its buffers after each step,
    the variance moving by the batch's population variance (ONNX's; onnxtrain.Module moves it by PyTorch's
    unbiased one)."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(0)
    mean0, var0 = rng.standard_normal(3).astype(np.float32), rng.uniform(1, 2, 3).astype(np.float32)
    inits = [numpy_helper.from_array(a, n) for a, n in [(np.ones(3, np.float32), "scale"),
                                                          (np.zeros(3, np.float32), "bias"), (mean0, "mean"),
                                                          (var0, "var")]]
    nodes = [helper.make_node("BatchNormalization", ["x", "scale", "bias", "mean", "var"], ["y", "m", "v"],
                              training_mode=1, momentum=0.8),
             helper.make_node("ReduceSumSquare", ["y"], ["loss"], keepdims=0)]
    graph = helper.make_graph(nodes, "bn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 3, 5])],
                              [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])], inits)
    path = tmp_path / "bn.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)]), path)
    session = onnxtrain.TrainingSession(str(path), "loss")
    assert set(session.parameter_names) == {"bias", "scale"}  # (the statistics are buffers: no gradient)
    x = rng.standard_normal((4, 3, 5)).astype(np.float32)
    session.train_step({"x": x})
    np.testing.assert_allclose(session.parameter("mean"), 0.8 * mean0 + 0.2 * x.mean(axis=(0, 2)), rtol=1e-5)
    np.testing.assert_allclose(session.parameter("var"), 0.8 * var0 + 0.2 * x.var(axis=(0, 2)), rtol=1e-5)
