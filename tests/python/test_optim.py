"""onnxtrain.optim: AdamW and SGD with PyTorch's numerics, as torch.optim.Optimizers (groups, schedulers,
state_dict), and in_backward=True, where an onnxtrain.Module's backward applies each update as soon as the
gradient is final and the parameter read no more, and frees the gradient."""

import copy

import pytest
import torch
from models import GPT, WithLoss

import onnxtrain
from onnxtrain.optim import SGD, AdamW

ADAMW_CASES = [{}, {"amsgrad": True}, {"maximize": True, "weight_decay": 0.3}, {"betas": (0.3, 0.9), "eps": 1e-6}]
SGD_CASES = [{}, {"momentum": 0.9}, {"momentum": 0.9, "nesterov": True},
             {"momentum": 0.9, "dampening": 0.1, "weight_decay": 0.01, "maximize": True}]


def stepped(make, dtype, steps=5):
    """A tensor after `steps` updates by the optimizer `make` builds, from the same gradients every time."""
    torch.manual_seed(0)
    p = torch.randn(4099, dtype=torch.float64).to(dtype).requires_grad_()
    g = torch.randn(4099, dtype=torch.float64).to(dtype) * 1e-3
    opt = make([p], lr=1e-2)
    for i in range(steps):
        p.grad = g * (i + 1) - p.detach() * 1e-3 * i
        opt.step()
    return p.detach(), opt


@pytest.mark.parametrize("kw", ADAMW_CASES)
def test_adamw_as_pytorchs(kw):
    ours, _ = stepped(lambda p, **a: AdamW(p, **a, **kw), torch.float32)
    theirs, _ = stepped(lambda p, **a: torch.optim.AdamW(p, **a, **kw), torch.float32)
    # (PyTorch's vectorized float sqrt is not always correctly rounded, ours is: some elements differ by an ulp)
    assert ((ours - theirs).abs().max() / theirs.abs().max()).item() < 1e-6


@pytest.mark.parametrize("kw", SGD_CASES)
def test_sgd_as_pytorchs_bit_for_bit(kw):
    ours, _ = stepped(lambda p, **a: SGD(p, **a, **kw), torch.float32)
    theirs, _ = stepped(lambda p, **a: torch.optim.SGD(p, **a, **kw), torch.float32)
    assert torch.equal(ours, theirs)


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_other_dtypes(dtype):
    ours, opt = stepped(AdamW, dtype)
    theirs, _ = stepped(torch.optim.AdamW, dtype)
    assert opt.state[next(iter(opt.state))]["exp_avg"].dtype == dtype
    tolerance = 1e-12 if dtype == torch.float64 else 1e-2  # (PyTorch rounds bfloat16 after each of its 5 passes)
    assert ((ours.double() - theirs.double()).abs().max() / theirs.double().abs().max()).item() < tolerance


def test_groups_scheduler_and_state_dict_resume():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2))
    x, y = torch.randn(12, 8), torch.randn(12, 2)

    def make(m):
        opt = AdamW([{"params": m[0].parameters(), "lr": 3e-2}, {"params": m[2].parameters(), "weight_decay": 0}],
                    lr=1e-2)
        return opt, torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)

    def train(m, opt, sched, steps):
        for _ in range(steps):
            opt.zero_grad()
            torch.nn.functional.mse_loss(m(x), y).backward()
            opt.step()
            sched.step()

    reference = copy.deepcopy(model)
    opt, sched = make(reference)
    train(reference, opt, sched, 6)

    opt, sched = make(model)
    train(model, opt, sched, 3)
    saved, saved_sched, saved_model = opt.state_dict(), sched.state_dict(), copy.deepcopy(model.state_dict())
    resumed = copy.deepcopy(model)
    resumed.load_state_dict(saved_model)
    opt2, sched2 = make(resumed)
    opt2.load_state_dict(saved)
    sched2.load_state_dict(saved_sched)
    assert opt2.param_groups[0]["lr"] == pytest.approx(3e-2 * 0.5)
    train(resumed, opt2, sched2, 3)
    for p, q in zip(resumed.parameters(), reference.parameters()):
        assert torch.equal(p, q)


def test_bad_arguments_are_refused():
    p = torch.nn.Parameter(torch.zeros(3))
    with pytest.raises(ValueError, match="learning rate"):
        AdamW([p], lr=-1)
    with pytest.raises(ValueError, match="beta"):
        AdamW([p], betas=(1.0, 0.9))
    with pytest.raises(ValueError, match="Nesterov"):
        SGD([p], nesterov=True)
    from onnxtrain import _onnxtrain as C

    hyper = C.SgdHyper(lr=0.1, weight_decay=0, momentum=0, dampening=0, nesterov=False, maximize=False)
    with pytest.raises(onnxtrain.InputError, match="the gradient is float64 \\[4\\], the parameter float32 \\[3\\]"):
        C.sgd_update([p.detach()], [torch.zeros(4, dtype=torch.float64)], [None], [False], hyper)


def gpt_and_batch():
    torch.manual_seed(0)
    model = WithLoss(GPT(vocab=128, dim=64, heads=4, layers=2, block=32)).train()
    idx = torch.randint(0, 128, (3, 32))
    return model, (idx, torch.roll(idx, -1, 1))


def train(model, opt, data, steps=3):
    losses = []
    for _ in range(steps):
        loss = model(*data)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize("early_gradients", [True, False])
def test_in_backward_trains_as_step_does_and_leaves_no_gradient(early_gradients):
    model, data = gpt_and_batch()
    options = onnxtrain.Options(early_gradients=early_gradients)
    stepwise, inside = onnxtrain.Module(copy.deepcopy(model), options), onnxtrain.Module(model, options)
    expected = train(stepwise, AdamW(stepwise.parameters(), lr=1e-2), data)
    seen = []
    for p in inside.parameters():
        p.register_post_accumulate_grad_hook(lambda p: seen.append(p))
    assert train(inside, AdamW(inside.parameters(), lr=1e-2, in_backward=True), data) == expected
    assert not seen and all(p.grad is None for p in inside.parameters())
    for (name, p), q in zip(inside.named_parameters(), stepwise.parameters()):
        assert torch.equal(p, q), name


def test_in_backward_frees_each_gradient_as_predicted():
    model, data = gpt_and_batch()
    data = tuple(t[:1, :8] for t in data)  # (a batch this small: the gradients make the peak)
    wrapped = onnxtrain.Module(model)
    opt = torch.optim.SGD(wrapped.parameters(), lr=1e-2)
    train(wrapped, opt, data, 1)  # built with every gradient returned at the end
    held = wrapped.runners()[0]
    opt = SGD(wrapped.parameters(), lr=1e-2, in_backward=True)
    train(wrapped, opt, data, 1)  # (an in_backward optimizer made since: the session is built again)
    runner = wrapped.runners()[0]
    assert runner is not held and runner.applied == set(runner.wrt)
    before = held.session.predict_memory(held.last_dims)
    after = runner.session.predict_memory(runner.last_dims)
    assert after["peak"] < before["peak"]
    assert after["at_peak"].get("gradient", 0) < before["gradients"]
    onnxtrain.reset_peak_stats()
    base = onnxtrain.allocator_stats()["allocated"]
    train(wrapped, opt, data, 1)
    assert onnxtrain.allocator_stats()["peak_allocated"] - base == after["peak"]


def test_gradient_accumulation_with_in_backward_is_refused():
    model, data = gpt_and_batch()
    wrapped = onnxtrain.Module(model)
    opt = AdamW(wrapped.parameters(), in_backward=True)
    train(wrapped, opt, data, 1)
    wrapped(*data).backward()
    with pytest.raises(RuntimeError, match="gradients cannot accumulate over micro-batches; use in_backward=False"):
        wrapped(*data).backward()


def test_one_parameter_one_in_backward_optimizer():
    p = torch.nn.Parameter(torch.zeros(3))
    opt = SGD([p], in_backward=True)
    with pytest.raises(ValueError, match="already updated in backward"):
        AdamW([p], in_backward=True)
    del opt
    AdamW([p], in_backward=True)  # (the first is gone)


def test_parameters_outside_the_module_are_updated_by_step():
    torch.manual_seed(0)
    inner, outer = torch.nn.Linear(4, 4), torch.nn.Parameter(torch.ones(4))
    wrapped = onnxtrain.Module(inner)
    opt = SGD([*wrapped.parameters(), outer], lr=0.1, in_backward=True)
    (wrapped(torch.randn(2, 4)) * outer).sum().backward()
    assert outer.grad is not None and inner.weight.grad is None
    opt.step()
    assert not torch.equal(outer.detach(), torch.ones(4))
