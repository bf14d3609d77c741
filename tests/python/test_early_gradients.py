"""Gradients to PyTorch as soon as they are final (Options.early_gradients, by default where something reads them
early: torch.distributed's hooks or a parameter's): each parameter's gradient is accumulated (its post-accumulate
hook, where DDP starts its all-reduce, fires) while onnxtrain's backward still runs, in the order backward makes them
final; the gradients equal those handed over at the end."""

import copy
import threading

import pytest
import torch
from models import GPT, WithLoss

import onnxtrain


def model_and_batch():
    torch.manual_seed(0)
    model = WithLoss(GPT(vocab=256, dim=128, heads=4, layers=4, block=64)).train()
    idx = torch.randint(0, 256, (4, 64))
    return model, (idx, torch.roll(idx, -1, 1))


def backward_running():
    return any(t.name == "onnxtrain-backward" and t.is_alive() for t in threading.enumerate())


def test_gradients_reach_autograd_while_backward_runs_in_the_order_they_are_final():
    model, data = model_and_batch()
    wrapped = onnxtrain.Module(model)
    seen = []
    for name, p in model.named_parameters():
        p.register_post_accumulate_grad_hook(lambda p, name=name: seen.append((name, backward_running())))
    wrapped(*data).backward()
    runner = wrapped.runners()[0]
    assert [n for n, _ in seen] == [n.removeprefix("module.") for n in runner.gradient_order]
    assert seen[0][1], "the first gradient arrived after backward had ended"
    assert not seen[-1][1]  # the last one ends it


def test_without_a_reader_gradients_come_at_the_end_from_the_callers_thread(monkeypatch):
    """By default, with no hook and no torch.distributed, backward runs in the thread that called it: nothing reads
    the gradients before it ends, and a second thread would only slow it down."""
    model, data = model_and_batch()
    wrapped = onnxtrain.Module(model)
    started = []
    start = threading.Thread.start
    monkeypatch.setattr(threading.Thread, "start", lambda t: (started.append(t.name), start(t))[1])
    wrapped(*data).backward()
    assert "onnxtrain-backward" not in started
    assert all(p.grad is not None for p in model.parameters())
    hooked = next(iter(model.parameters()))
    hooked.register_post_accumulate_grad_hook(lambda p: None)  # a reader: the next backward hands them over early
    wrapped(*data).backward()
    assert "onnxtrain-backward" in started


@pytest.mark.parametrize("exporter", ["torch.export", "torchscript"])
def test_early_gradients_equal_gradients_handed_over_at_the_end(exporter):
    model, data = model_and_batch()
    early = onnxtrain.Module(copy.deepcopy(model), onnxtrain.Options(exporter=exporter))
    late = onnxtrain.Module(model, onnxtrain.Options(exporter=exporter, early_gradients=False))
    for m in (early, late):
        m(*data).backward()
    for (name, p), (_, q) in zip(early.named_parameters(), late.named_parameters()):
        assert torch.equal(p.grad, q.grad), name


def test_inputs_that_need_gradients_get_them_too():
    torch.manual_seed(0)
    layer = torch.nn.Linear(8, 4)
    wrapped = onnxtrain.Module(copy.deepcopy(layer))
    x = torch.randn(3, 8, requires_grad=True)
    y = x.detach().clone().requires_grad_()
    wrapped(x).square().sum().backward()
    layer(y).square().sum().backward()
    torch.testing.assert_close(x.grad, y.grad)
    for p, q in zip(wrapped.parameters(), layer.parameters()):
        torch.testing.assert_close(p.grad, q.grad)


@pytest.mark.parametrize("early", [True, False])
def test_a_kept_loss_holds_no_gradients(early):
    """A training loop keeps the step's loss until the next step assigns it: once the parameters' gradients are
    dropped (zero_grad), that loss must hold none of onnxtrain's memory of them (the handoff held all of them)."""
    model, data = model_and_batch()
    wrapped = onnxtrain.Module(model, onnxtrain.Options(early_gradients=early))
    loss = wrapped(*data)
    loss.backward()
    grads = sum(p.grad.nbytes for p in model.parameters())
    for p in model.parameters():
        p.grad = None
    held = onnxtrain.memory_stats()["allocated"]
    loss = None
    assert held - onnxtrain.memory_stats()["allocated"] < grads / 100
