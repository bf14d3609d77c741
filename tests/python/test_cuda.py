"""The CUDA backend from Python: CUDA tensors cross by DLPack without copies, and a session on the GPU computes
what the CPU kernels and PyTorch on CUDA compute. Skipped without a GPU or without CUDA in the build."""
import numpy as np
import pytest
import torch
from onnx import TensorProto, helper

import onnxtrain

pytestmark = pytest.mark.skipif(
    not (torch.cuda.is_available() and onnxtrain.device_available("cuda")),
    reason="no CUDA device, or onnxtrain built without CUDA",
)


def test_cuda_tensors_cross_without_copies():
    for dtype in (torch.float32, torch.bfloat16, torch.int64):
        x = torch.arange(15, device="cuda").reshape(3, 5).to(dtype)
        t = onnxtrain._onnxtrain.from_dlpack(x)
        assert t.device == "cuda:0" and t.data_ptr == x.data_ptr() and t.shape == (3, 5)
        assert t.__dlpack_device__() == (2, 0)
        y = torch.from_dlpack(t)
        assert y.device.type == "cuda" and y.data_ptr() == x.data_ptr() and torch.equal(y, x)


def test_onnxtrains_gpu_memory_is_pytorchs():
    """The segments of onnxtrain's allocator come from PyTorch's (set once PyTorch has initialized CUDA):
    torch.cuda.memory_allocated counts them."""
    torch.cuda.init()
    assert onnxtrain._onnxtrain.cuda_memory_source() == "PyTorch's CUDA allocator"
    gpu = onnxtrain.Session.from_bytes(mlp_model(), onnxtrain.SessionOptions(device="cuda", keep_cache=True))
    feeds = {"x": torch.randn(4096, 64, device="cuda"), "w": torch.randn(64, 48, device="cuda"),
             "b": torch.randn(48, device="cuda")}
    onnxtrain.empty_cache("cuda:0")
    torch.cuda.synchronize()
    before, ours = torch.cuda.memory_allocated(), onnxtrain.memory_stats("cuda:0")["cached"]
    out = gpu.run(feeds)["y"]
    grown = onnxtrain.memory_stats("cuda:0")["cached"] - ours
    assert grown >= 4096 * 48 * 4
    torch_grown = torch.cuda.memory_allocated() - before
    assert grown <= torch_grown <= grown + 512 * 16, (grown, torch_grown)  # (PyTorch rounds blocks to 512 bytes)
    del out
    onnxtrain.empty_cache("cuda:0")
    assert torch.cuda.memory_allocated() == before  # the segments back in PyTorch's cache


def test_a_device_looked_at_before_pytorch_initializes_cuda_still_takes_its_memory():
    """device_available and memory_stats before PyTorch initialized CUDA (as a test module's skipif does) bind no
    memory source: the device's first block, after, comes from PyTorch's allocator (in a fresh process, where
    PyTorch has not initialized CUDA)."""
    import subprocess
    import sys

    code = """
import torch, onnxtrain
assert not torch.cuda.is_initialized()
assert onnxtrain.device_available("cuda") and onnxtrain.memory_stats("cuda:0")["cached"] == 0
x = torch.ones(1 << 20, device="cuda")
before = torch.cuda.memory_allocated()
session = onnxtrain.Session.from_bytes(MODEL, onnxtrain.SessionOptions(device="cuda"))
out = session.run({"x": x})["y"]
assert torch.cuda.memory_allocated() - before >= (1 << 22), torch.cuda.memory_allocated() - before
"""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n"])
    model = helper.make_model(helper.make_graph([helper.make_node("Neg", ["x"], ["y"])], "neg", [x], [y]),
                              opset_imports=[helper.make_opsetid("", 17)])
    run = subprocess.run([sys.executable, "-c", f"MODEL = {model.SerializeToString()!r}\n" + code],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-2000:]


def test_work_goes_on_pytorchs_current_stream():
    """Under torch.cuda.stream(side), onnxtrain's kernels queue behind PyTorch's on that stream: an input still being
    made there (behind a long kernel) is read once made, and the results are eager's."""
    import copy

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 64)).cuda()
    wrapped = onnxtrain.Module(copy.deepcopy(model))
    x = torch.randn(512, 64, device="cuda")
    wrapped(x).sum().backward()  # (captured and built first, outside the stream)
    for p in wrapped.parameters():
        p.grad = None
    side = torch.cuda.Stream()  # (PyTorch's streams do not wait for the legacy default stream)
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(200_000_000)
        late = x * 2
        loss = wrapped(late).square().sum()
        loss.backward()
    torch.cuda.current_stream().wait_stream(side)
    want = model(x * 2).square().sum()
    want.backward()
    assert abs(loss.item() - want.item()) <= 1e-4 * abs(want.item())
    assert_grads_close(wrapped, model)


def mlp_model():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 64])
    w = helper.make_tensor_value_info("w", TensorProto.FLOAT, [64, 48])
    b = helper.make_tensor_value_info("b", TensorProto.FLOAT, [48])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 48])
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"]),
        helper.make_node("Add", ["h", "b"], ["hb"]),
        helper.make_node("Gelu", ["hb"], ["g"]),
        helper.make_node("Softmax", ["g"], ["y"], axis=-1),
    ]
    graph = helper.make_graph(nodes, "mlp", [x, w, b], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)]).SerializeToString()


def test_a_session_on_the_gpu_matches_the_cpu_and_pytorch():
    gen = torch.Generator().manual_seed(0)
    x, w, b = torch.randn(32, 64, generator=gen), torch.randn(64, 48, generator=gen), torch.randn(48, generator=gen)
    on_cpu = onnxtrain.Session.from_bytes(mlp_model()).run({"x": x, "w": w, "b": b})["y"]
    gpu = onnxtrain.Session.from_bytes(mlp_model(), onnxtrain.SessionOptions(device="cuda"))
    out = gpu.run({"x": x.cuda(), "w": w.cuda(), "b": b.cuda()})["y"]
    assert out.device == "cuda:0"
    got = torch.from_dlpack(out)
    assert got.is_cuda
    want = torch.softmax(torch.nn.functional.gelu(x.cuda() @ w.cuda() + b.cuda()), -1)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got.cpu().numpy(), on_cpu, rtol=1e-5, atol=1e-6)


def test_host_inputs_on_a_gpu_session_are_refused():
    gpu = onnxtrain.Session.from_bytes(mlp_model(), onnxtrain.SessionOptions(device="cuda"))
    with pytest.raises(onnxtrain.InputError, match="cuda:0"):
        gpu.run({"x": torch.zeros(2, 64), "w": torch.zeros(64, 48).cuda(), "b": torch.zeros(48).cuda()})


def gpt_pair(dropout=0.0, seed=0):
    """The toy GPT on the GPU, and a copy of it for onnxtrain."""
    import copy
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
    from gpt import GPT

    torch.manual_seed(seed)
    eager = GPT(vocab=65, dim=64, heads=4, layers=2, block=32, dropout=dropout).cuda()
    return eager, copy.deepcopy(eager)


def batch(seed, b=4, t=32):
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, 65, (b, t), generator=gen).cuda(), torch.randint(0, 65, (b, t), generator=gen).cuda()


def lm_loss(model, idx, target):
    logits = model(idx)
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), target.reshape(-1))


def assert_grads_close(ours, eager, rtol=1e-4):
    """Every gradient within rtol of the largest gradient (of any parameter) of eager's."""
    largest = max(p.grad.abs().max().item() for p in eager.parameters())
    for (name, p), q in zip(ours.named_parameters(), eager.parameters()):
        assert p.grad is not None and p.grad.is_cuda, name
        err = (p.grad - q.grad).abs().max().item()
        assert err <= rtol * largest, f"{name}: {err} against the largest gradient {largest}"


def assert_grads_aligned(ours, eager):
    """Every gradient points where eager's does (bf16 autocast): cosine >= 0.999."""
    for (name, p), q in zip(ours.named_parameters(), eager.parameters()):
        cos = torch.nn.functional.cosine_similarity(p.grad.flatten().float(), q.grad.flatten().float(), dim=0)
        assert cos.item() >= 0.999, f"{name}: cosine {cos.item()}"


def test_a_static_step_copies_nothing_to_the_host():
    """Once captured, a training step of the toy GPT reads no value back from the GPU: the shapes, axes and scalars
    ops read on the host are known there."""
    _, ours = gpt_pair()
    wrapped = onnxtrain.Module(ours)
    idx, target = batch(3)
    for step in range(3):
        before = onnxtrain._onnxtrain.cuda_copies_to_host()
        lm_loss(wrapped, idx, target).backward()
        copies = onnxtrain._onnxtrain.cuda_copies_to_host() - before
        assert step == 0 or copies == 0, f"step {step}: {copies} copies to the host"


@pytest.mark.parametrize("front_door", ["module", "compile"])
def test_the_toy_gpt_trains_on_the_gpu_as_eager(front_door):
    """Loss and every gradient as PyTorch eager on CUDA computes them (float32), over 10 AdamW steps."""
    eager, ours = gpt_pair()
    from onnxtrain import dynamo

    # (the backend itself: the "onnxtrain" name needs the installed package's entry point, tested on the CPU)
    wrapped = onnxtrain.Module(ours) if front_door == "module" else torch.compile(ours, backend=dynamo.backend)
    opt_e = torch.optim.AdamW(eager.parameters(), lr=1e-3)
    opt_o = torch.optim.AdamW(ours.parameters(), lr=1e-3)
    for step in range(10):
        idx, target = batch(step)
        le, lo = lm_loss(eager, idx, target), lm_loss(wrapped, idx, target)
        le.backward()
        lo.backward()
        assert lo.is_cuda
        assert abs(lo.item() - le.item()) <= 1e-4 * abs(le.item()), (step, lo.item(), le.item())
        if step == 0:
            assert_grads_close(ours, eager)
        opt_e.step()
        opt_o.step()
        opt_e.zero_grad()
        opt_o.zero_grad()


def test_bf16_autocast_on_the_gpu_matches_eager():
    """Under CUDA autocast (bfloat16) each gradient points where eager's does: cosine >= 0.999."""
    eager, ours = gpt_pair()
    wrapped = onnxtrain.Module(ours)
    idx, target = batch(0)
    with torch.autocast("cuda", torch.bfloat16):
        le, lo = lm_loss(eager, idx, target), lm_loss(wrapped, idx, target)
    le.backward()
    lo.backward()
    assert abs(lo.item() - le.item()) <= 1e-2 * abs(le.item())
    assert_grads_aligned(ours, eager)


def test_dropout_and_recompute_on_the_gpu_match_the_cpu():
    """With dropout (the same counter-based masks on both devices) and layer-wise recompute, the GPU's step gives
    the CPU's loss and gradients."""
    gpu_model, _ = gpt_pair(dropout=0.1)
    cpu_model = gpt_pair(dropout=0.1)[1].cpu()
    options = onnxtrain.Options(memory_opt_level=1)
    on_gpu, on_cpu = onnxtrain.Module(gpu_model, options), onnxtrain.Module(cpu_model, options)
    idx, target = batch(1)
    torch.manual_seed(5)
    lg = lm_loss(on_gpu, idx, target)
    torch.manual_seed(5)  # (the step's seed comes from PyTorch's generator)
    lc = lm_loss(on_cpu, idx.cpu(), target.cpu())
    lg.backward()
    lc.backward()
    assert abs(lg.item() - lc.item()) <= 1e-4 * abs(lc.item())
    largest = max(p.grad.abs().max().item() for p in cpu_model.parameters())
    for (name, p), q in zip(gpu_model.named_parameters(), cpu_model.parameters()):
        assert (p.grad.cpu() - q.grad).abs().max().item() <= 1e-4 * largest, name


def test_a_module_on_two_devices_is_refused():
    model = torch.nn.Linear(4, 3).cuda()
    with pytest.raises(onnxtrain.InputError, match="cuda:0"):
        onnxtrain.Module(model)(torch.zeros(2, 4))


def test_the_lm_with_its_loss_trains_on_the_gpu_as_eager():
    """The example's model, its loss inside (the fused head and cross-entropy), with layer-wise recompute: the loss
    and every gradient as eager's on CUDA, three AdamW steps, and the allocator's peak as predicted."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
    from train_gpt import CharLM

    eager, ours = (CharLM(m) for m in gpt_pair())
    wrapped = onnxtrain.Module(ours, onnxtrain.Options(memory_opt_level=1))
    opt_e = torch.optim.AdamW(eager.parameters(), lr=1e-3)
    opt_o = torch.optim.AdamW(ours.parameters(), lr=1e-3)
    for step in range(3):
        idx, target = batch(10 + step)
        target[0, :3] = -100  # ignored, as cross_entropy's default ignore_index says
        if step == 2:
            onnxtrain.reset_peak_stats("cuda:0")
            base = onnxtrain.memory_stats("cuda:0")["allocated"]
        le, lo = eager(idx, target), wrapped(idx, target)
        le.backward()
        lo.backward()
        assert abs(lo.item() - le.item()) <= 1e-4 * abs(le.item()), (step, lo.item(), le.item())
        if step == 0:
            assert_grads_close(ours, eager)
        for opt in (opt_e, opt_o):
            opt.step()
            opt.zero_grad()
        del le, lo  # (a loss kept into the next step is in its base, and freed before its peak)
    import json

    predicted = json.loads(wrapped.memory_report(json=True))["predicted_after"]["peak"]
    assert onnxtrain.memory_stats("cuda:0")["peak_allocated"] - base == predicted


@pytest.mark.parametrize("door", ["module", "compile"])
@pytest.mark.parametrize("name", ["llama", "qwen2", "bert"])
def test_transformers_models_train_on_the_gpu_as_eager(name, door):
    """transformers' Llama (grouped-query heads, RMSNorm, rotary embeddings, SwiGLU), Qwen2 and BERT (small configs,
    random weights, a padded batch) on the GPU through both front doors: the loss, the logits and every gradient as
    PyTorch eager on CUDA computes them (float32, 1e-4 of the largest gradient), and the losses of 10 AdamW steps."""
    import copy

    from parity import assert_steps_as_eager
    from test_transformers_parity import MODELS
    from test_transformers_parity import batch as padded_batch

    from onnxtrain import dynamo

    torch.manual_seed(0)
    eager = MODELS[name]().train().cuda()
    ours = copy.deepcopy(eager)
    wrapped = onnxtrain.Module(ours) if door == "module" else torch.compile(ours, backend=dynamo.backend)
    kw = {k: v.cuda() for k, v in padded_batch().items()}
    got, want = wrapped(**kw), eager(**kw)
    assert got.loss.is_cuda and abs(got.loss.item() - want.loss.item()) <= 1e-4 * abs(want.loss.item())
    torch.testing.assert_close(got.logits, want.logits, rtol=1e-4, atol=1e-4)
    got.loss.backward()
    want.loss.backward()
    assert_grads_close(ours, eager)
    assert_steps_as_eager(eager, ours, wrapped, kw, steps=10)


def test_a_llama_under_bf16_autocast_on_the_gpu_matches_eager():
    """Under CUDA autocast (bfloat16) a transformers Llama's gradients point where eager's do: cosine >= 0.999."""
    import copy

    from test_transformers_parity import MODELS
    from test_transformers_parity import batch as padded_batch

    torch.manual_seed(0)
    eager = MODELS["llama"]().train().cuda()
    ours = copy.deepcopy(eager)
    wrapped = onnxtrain.Module(ours)
    kw = {k: v.cuda() for k, v in padded_batch().items()}
    with torch.autocast("cuda", torch.bfloat16):
        lo, le = wrapped(**kw).loss, eager(**kw).loss
    lo.backward()
    le.backward()
    assert abs(lo.item() - le.item()) <= 1e-2 * abs(le.item())
    assert_grads_aligned(ours, eager)


class ScaleAndSave(torch.autograd.Function):
    """A custom Function that saves a tensor for its backward: it runs in PyTorch on CUDA tensors (PythonOp)."""

    @staticmethod
    def forward(ctx, x, y):
        ctx.save_for_backward(y)
        return x * y

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        return g * y, None


def test_a_custom_function_trains_on_the_gpu_as_eager():
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = torch.nn.Linear(16, 32), torch.nn.Linear(32, 4)

        def forward(self, x):
            return self.b(ScaleAndSave.apply(torch.tanh(self.a(x)), torch.sigmoid(x.sum(-1, keepdim=True))))

    import copy

    torch.manual_seed(0)
    eager = Net().cuda()
    ours = onnxtrain.Module(copy.deepcopy(eager))
    for step in range(2):
        x = torch.randn(8, 16, device="cuda")
        want, got = eager(x).square().mean(), ours(x).square().mean()
        want.backward()
        got.backward()
        assert abs(got.item() - want.item()) <= 1e-5 * abs(want.item()), step
        assert_grads_close(ours, eager, rtol=1e-5)
        for m in (eager, ours):
            for p in m.parameters():
                p.grad = None


def test_a_training_session_trains_on_the_gpu_as_on_the_cpu(tmp_path):
    """TrainingSession with SessionOptions(device="cuda"): numpy batches copied to the GPU, its parameters and the
    optimizer's moments there, the losses of 5 AdamW steps as the CPU's."""
    from test_training_session import gpt_model

    _, path, batch = gpt_model(tmp_path)
    opt = onnxtrain.OptimizerOptions("adamw", lr=1e-2)
    gpu = onnxtrain.TrainingSession(path, "loss", opt, onnxtrain.SessionOptions(device="cuda"))
    cpu = onnxtrain.TrainingSession(path, "loss", opt)
    for step in range(5):
        want, got = cpu.train_step(batch), gpu.train_step(batch)
        assert abs(got - want) <= 1e-4 * abs(want), (step, got, want)
        gpu.optimizer_step(), cpu.optimizer_step()
        gpu.lazy_reset_grad(), cpu.lazy_reset_grad()
    name = gpu.parameter_names[0]
    on_gpu = torch.from_dlpack(gpu.parameter(name))
    assert on_gpu.is_cuda
    np.testing.assert_allclose(on_gpu.cpu().numpy(), cpu.parameter(name), rtol=1e-4, atol=1e-5)

