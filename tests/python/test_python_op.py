"""Custom torch.autograd.Functions inside a wrapped module run in PyTorch, called from onnxtrain's graph at their
place (com.onnxtrain.PythonOp): forward in forward, their own backward in backward. Loss and every gradient as
eager's (1e-5 of the largest), through onnxtrain.Module and torch.compile: a straight-through rounding, a gradient
scaling with a non-tensor argument, a Function of two tensors with two results that saves tensors for its
backward, and the scaling inside a transformers Llama's MLP; a Function whose result is shaped as none of its
arguments is refused by name, and one beside an op the direct capture does not translate names both."""

import copy

import pytest
import torch
from torch import nn

import onnxtrain


class StraightThroughRound(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return torch.round(x * 4) / 4

    @staticmethod
    def backward(ctx, g):
        return g


class GradScale(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, scale):
        ctx.scale = scale
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        return g * ctx.scale, None


class MulAndAdd(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, y):
        ctx.save_for_backward(x, y)
        return x * y, x + y

    @staticmethod
    def backward(ctx, g_prod, g_sum):
        x, y = ctx.saved_tensors
        return g_prod * y + g_sum, g_prod * x + g_sum


class Flatten(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.reshape(-1)

    @staticmethod
    def backward(ctx, g):
        return g


class MLP(nn.Module):
    def __init__(self, function):
        super().__init__()
        self.function = function
        self.a, self.b, self.c = nn.Linear(8, 16), nn.Linear(16, 16), nn.Linear(16, 4)

    def forward(self, x):
        h = torch.tanh(self.a(x))
        if self.function == "round":
            h = StraightThroughRound.apply(h)
        elif self.function == "scale":
            h = GradScale.apply(h, 0.25)
        elif self.function == "two":
            p, s = MulAndAdd.apply(h, torch.sigmoid(self.b(h)))
            h = p - s
        return self.c(torch.relu(self.b(h)))


def assert_like_eager(eager, ours, inputs, loss_of, tol=1e-5):
    loss = loss_of(eager(*inputs))
    loss.backward()
    got = loss_of(ours(*inputs))
    got.backward()
    assert torch.allclose(got, loss, rtol=1e-5, atol=1e-6), (got, loss)
    grads = {n: p.grad for n, p in eager.named_parameters()}
    largest = max(g.abs().max() for g in grads.values())
    for n, p in ours.named_parameters():
        n = n.removeprefix("_orig_mod.")  # (torch.compile's wrapper)
        assert p.grad is not None, n
        assert (p.grad - grads[n]).abs().max() <= tol * largest, n


@pytest.mark.parametrize("function", ["round", "scale", "two"])
def test_a_function_in_an_mlp_trains_as_in_eager(function):
    torch.manual_seed(0)
    eager = MLP(function)
    ours = onnxtrain.Module(copy.deepcopy(eager))
    x = torch.randn(6, 8)
    assert_like_eager(eager, ours, (x,), lambda y: (y ** 2).mean())
    for _ in range(2):  # the next steps too: each call keeps its own context and lets go of it after backward
        for m in (eager, ours):
            for p in m.parameters():
                p.grad = None
        assert_like_eager(eager, ours, (torch.randn(6, 8),), lambda y: (y ** 2).mean())


@pytest.mark.parametrize("door", ["module", "compile"])
def test_the_scaling_inside_a_llama_mlp_trains_as_in_eager(door):
    transformers = pytest.importorskip("transformers")
    from transformers.models.llama import modeling_llama

    class ScaledMLP(modeling_llama.LlamaMLP):
        def forward(self, x):
            return self.down_proj(GradScale.apply(self.act_fn(self.gate_proj(x)) * self.up_proj(x), 0.5))

    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                      use_cache=False)
    eager = transformers.LlamaForCausalLM(config).train()
    for layer in eager.model.layers:
        mlp = ScaledMLP(config)
        mlp.load_state_dict(layer.mlp.state_dict())
        layer.mlp = mlp
    ours = onnxtrain.Module(copy.deepcopy(eager)) if door == "module" else torch.compile(
        copy.deepcopy(eager), backend="onnxtrain")
    ids = torch.randint(0, 64, (2, 12))
    assert_like_eager(eager, ours, (ids,), lambda out: out.logits.float().pow(2).mean())


def test_a_result_shaped_as_no_argument_is_refused_by_name():
    class Net(nn.Module):
        def forward(self, x):
            return Flatten.apply(x * 2)

    with pytest.raises(onnxtrain.UnsupportedError, match="Flatten"):
        onnxtrain.Module(Net())(torch.randn(3, 4, requires_grad=True))


def test_a_function_beside_an_op_the_capture_does_not_translate_names_both(monkeypatch):
    monkeypatch.setenv("ONNXTRAIN_CAPTURE_CACHE", "0")

    class Net(nn.Module):
        def forward(self, x):
            return StraightThroughRound.apply(torch.atan2(x, x + 1))  # (atan2: no translation of its own)

    with pytest.raises(onnxtrain.UnsupportedError, match=r"StraightThroughRound.*no translation of aten\.atan2"):
        onnxtrain.Module(Net())(torch.randn(3, 4, requires_grad=True))


def test_the_memory_report_says_what_lives_outside_the_plan():
    torch.manual_seed(0)
    ours = onnxtrain.Module(MLP("two"))
    ours(torch.randn(6, 8)).sum().backward()
    assert "outside the plan: 1 call(s) of custom autograd Functions" in ours.memory_report()


@pytest.mark.parametrize("function", ["round", "scale", "two"])
def test_a_function_through_torch_compile_trains_as_in_eager(function):
    torch.manual_seed(0)
    eager = MLP(function)
    ours = torch.compile(copy.deepcopy(eager), backend="onnxtrain")
    assert_like_eager(eager, ours, (torch.randn(6, 8),), lambda y: (y ** 2).mean())


def test_a_capture_in_this_process_leaves_autograd_functions_as_they_were():
    torch.manual_seed(0)
    eager = MLP("scale")
    ours = onnxtrain.Module(copy.deepcopy(eager), onnxtrain.Options(capture_process=False))
    assert_like_eager(eager, ours, (torch.randn(6, 8),), lambda y: (y ** 2).mean())
    x = torch.randn(3, requires_grad=True)
    GradScale.apply(x, 3.0).sum().backward()  # (the capture put Function.apply back)
    assert torch.equal(x.grad, torch.full((3,), 3.0))
