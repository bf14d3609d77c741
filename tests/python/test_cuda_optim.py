"""onnxtrain.optim on the GPU: each update the CPU kernel's bit for bit (one element's math, kernels/parameter_math.h,
compiled for both), AdamW as PyTorch's on CUDA, and in_backward=True training an onnxtrain.Module on the GPU as
step() does. Skipped without a GPU or without CUDA in the build."""

import copy

import pytest
import torch
from models import GPT, WithLoss
from test_optim import train

import onnxtrain
from onnxtrain.optim import SGD, AdamW

pytestmark = pytest.mark.skipif(
    not (torch.cuda.is_available() and onnxtrain.device_available("cuda")),
    reason="no CUDA device, or onnxtrain built without CUDA",
)

CASES = [(AdamW, {}), (AdamW, {"amsgrad": True}), (AdamW, {"maximize": True, "weight_decay": 0.3}),
         (AdamW, {"betas": (0.3, 0.9), "eps": 1e-6}), (SGD, {}), (SGD, {"momentum": 0.9}),
         (SGD, {"momentum": 0.9, "nesterov": True}),
         (SGD, {"momentum": 0.9, "dampening": 0.1, "weight_decay": 0.01, "maximize": True})]


def stepped(make, dtype, device, steps=5):
    """A tensor after `steps` updates on `device` by the optimizer `make` builds, from the same gradients."""
    torch.manual_seed(0)
    p = torch.randn(4099, dtype=torch.float64).to(dtype).to(device).requires_grad_()
    g = (torch.randn(4099, dtype=torch.float64).to(dtype) * 1e-3).to(device)
    opt = make([p], lr=1e-2)
    for i in range(steps):
        p.grad = g * (i + 1) - p.detach() * 1e-3 * i
        opt.step()
    return p.detach().cpu(), opt


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
@pytest.mark.parametrize("kind, kw", CASES)
def test_gpu_updates_are_the_cpus_bit_for_bit(kind, kw, dtype):
    gpu, opt = stepped(lambda p, **a: kind(p, **a, **kw), dtype, "cuda")
    cpu, _ = stepped(lambda p, **a: kind(p, **a, **kw), dtype, "cpu")
    for state in opt.state.values():
        assert all(t.is_cuda for t in state.values() if t.dim() > 0)
    assert torch.equal(gpu, cpu), ((gpu.double() - cpu.double()).abs().max().item())


@pytest.mark.parametrize("kw", [{}, {"amsgrad": True}])
def test_gpu_adamw_as_pytorchs_on_cuda(kw):
    ours, _ = stepped(lambda p, **a: AdamW(p, **a, **kw), torch.float32, "cuda")
    theirs, _ = stepped(lambda p, **a: torch.optim.AdamW(p, **a, **kw, foreach=False), torch.float32, "cuda")
    assert ((ours - theirs).abs().max() / theirs.abs().max()).item() < 1e-6


def test_in_backward_on_the_gpu_trains_as_step_does():
    """The parameters after one step as step()'s, and the losses of two more. (Not the parameters after three: the
    embedding's gradient sums by atomics, in any order, and AdamW turns a last-bit difference of a gradient that is
    zero but for rounding, as the key projection's bias's under a softmax, into one of lr.)"""
    torch.manual_seed(0)
    model = WithLoss(GPT(vocab=128, dim=64, heads=4, layers=2, block=32)).cuda().train()
    idx = torch.randint(0, 128, (3, 32)).cuda()
    data = (idx, torch.roll(idx, -1, 1))
    stepping, inside = onnxtrain.Module(copy.deepcopy(model)), onnxtrain.Module(copy.deepcopy(model))
    opt_s, opt_i = AdamW(stepping.parameters(), lr=1e-2), AdamW(inside.parameters(), lr=1e-2, in_backward=True)
    expected, got = train(stepping, opt_s, data, 1), train(inside, opt_i, data, 1)
    assert got == pytest.approx(expected, rel=1e-6)
    assert all(p.grad is None for p in inside.parameters())
    for (name, p), q in zip(inside.named_parameters(), stepping.parameters()):
        assert p.is_cuda and (p - q).abs().max().item() <= 1e-6, (name, (p - q).abs().max().item())
    assert train(inside, opt_i, data, 2) == pytest.approx(train(stepping, opt_s, data, 2), rel=1e-5)
