"""Random models (random_models.py) trained through onnxtrain against eager: each seed draws a model, a memory
optimizer level or budget, a front door (onnxtrain.Module or torch.compile's backend) and two batches of different
sizes (one capture serves both). In float32 the loss, the logits where returned and every parameter's gradient
agree with eager's on each batch; under bf16 autocast each is as near eager's float32 as eager's own under autocast
is (within a factor, or bf16's rounding where the two round apart: a ReLU's input near 0); the first step's peak is
the predicted one. And each seed trains three optimizer steps of its own drawing (SGD or AdamW: PyTorch's,
onnxtrain.optim's, or onnxtrain.optim's applied in backward; one or two micro-batches a step) as eager does with
PyTorch's, then runs in eval mode. ONNXTRAIN_RANDOM_CASES sets how many seeds run (CI's default below),
ONNXTRAIN_RANDOM_SEED the first: a failure names its seed and its model, and ONNXTRAIN_RANDOM_SEED=<seed>
ONNXTRAIN_RANDOM_CASES=1 runs it alone."""

import copy
import json
import os

import pytest
import torch

import onnxtrain
from random_models import Draws, Model, describe, draw_batch, draw_shape

FIRST = int(os.environ.get("ONNXTRAIN_RANDOM_SEED", "1"))
COUNT = int(os.environ.get("ONNXTRAIN_RANDOM_CASES", "12"))
SEEDS = range(FIRST, FIRST + COUNT)


def drawn(seed, **options):
    """The seed's draws (for its batches next), model, an eager copy of it and that copy through a front door with
    `options` beside the memory settings drawn."""
    d = Draws(seed)
    shape = draw_shape(d)
    torch.manual_seed(seed)
    eager = Model(shape)
    mine = copy.deepcopy(eager)
    memory = d.pick([{"memory_opt_level": 0}, {"memory_opt_level": 1}, {"memory_opt_level": 2},
                     {"memory_budget": "0.3"}])
    options.update(memory)
    if d.one_in(3):
        torch._dynamo.reset()  # (each model's forward is the same code: past its recompile limit it runs eager)
        door = torch.compile(mine, backend="onnxtrain", options=options, dynamic=True)
        return d, shape, eager, mine, door, f"torch.compile, {memory}"
    return d, shape, eager, mine, onnxtrain.Module(mine, onnxtrain.Options(**options)), f"onnxtrain.Module, {memory}"


def split(out):
    """A model's output as its loss and its logits (None where it returns the loss alone)."""
    return out if isinstance(out, tuple) else (out, None)


def run(model, batch):
    """The model's loss and a copy of its logits (None where it returns none) on the batch, after its backward:
    the logits themselves dropped before it, as a training loop drops them (so the step's predicted peak counts)."""
    model.zero_grad(set_to_none=True)
    out = model(*batch)
    loss, logits = split(out)
    logits = None if logits is None else logits.detach().clone()
    del out
    loss.backward()
    return loss.detach(), logits


def gradients(model):
    return {n: p.grad.clone() if p.grad is not None else None for n, p in model.named_parameters()}


def errors(got, want):
    """Each gradient's largest difference from `want`'s, over the larger of its own largest and a hundredth of the
    model's (a gradient that is 0 but for rounding, as a key's bias's or that of queries that see one key each)."""
    floor = 1e-2 * max([float(g.abs().max()) for g in want.values() if g is not None] + [1e-30])
    r = {}
    for name, g in want.items():
        assert (got[name] is None) == (g is None), f"{name}'s gradient"
        if g is not None:
            r[name] = float((got[name] - g).abs().max() / g.abs().max().clamp(min=floor))
    return r


def assert_peak_as_predicted(where, path):
    """The first training step's memory, recorded (Options.memory_timeline): its peak as predicted before it ran."""
    timeline = json.loads(path.read_text())
    assert timeline["measured_peak"] == timeline["predicted_peak"], f"{where}: the step's peak"


@pytest.mark.parametrize("seed", SEEDS)
def test_random_model_trains_as_eager(seed, tmp_path):
    d, shape, eager, mine, door, how = drawn(seed, memory_timeline=str(tmp_path / "first.png"))
    for call in range(2):
        batch = draw_batch(d, shape)
        where = f"seed {seed}, {how}, call {call}: {describe(shape, batch)}"
        (want, want_logits), (got, got_logits) = run(eager, batch), run(door, batch)
        assert got.item() == pytest.approx(want.item(), rel=1e-5, abs=1e-6), f"{where}: loss"
        if want_logits is not None:
            torch.testing.assert_close(got_logits, want_logits, rtol=1e-5, atol=1e-5, msg=f"{where}: logits")
        for name, error in errors(gradients(mine), gradients(eager)).items():
            assert error < 1e-4, f"{where}: {name}'s gradient is {error:.2e} of its scale from eager's"
        if call == 0:
            assert_peak_as_predicted(where, tmp_path / "first.json")


@pytest.mark.parametrize("seed", SEEDS)
def test_random_model_trains_under_bf16_autocast_as_eager_does(seed, tmp_path):
    d, shape, eager, mine, door, how = drawn(seed, memory_timeline=str(tmp_path / "first.png"))
    eager16 = copy.deepcopy(eager)
    for call in range(2):
        batch = draw_batch(d, shape)
        where = f"seed {seed}, {how}, bf16, call {call}: {describe(shape, batch)}"
        reference, _ = run(eager, batch)
        with torch.autocast("cpu", torch.bfloat16):
            (theirs, _), (got, _) = run(eager16, batch), run(door, batch)
        off, their_off = abs(got.item() - reference.item()), abs(theirs.item() - reference.item())
        assert off <= max(6 * their_off, 2e-3 * abs(reference.item())), \
            f"{where}: loss {got.item()}, eager's {theirs.item()}, in float32 {reference.item()}"
        want = gradients(eager)
        theirs = errors(gradients(eager16), want)
        for name, error in errors(gradients(mine), want).items():
            assert error <= max(5 * theirs[name], 0.15), \
                f"{where}: {name}'s gradient is {error:.2e} of its scale from float32's, eager's {theirs[name]:.2e}"
        if call == 0:
            assert_peak_as_predicted(where, tmp_path / "first.json")


OPTIMIZERS = ["torch-sgd", "sgd", "sgd-in-backward", "torch-adamw", "adamw", "adamw-in-backward"]


def optimizer(kind, model, lr):
    """SGD with momentum or AdamW over the model's trained parameters: PyTorch's (torch-), onnxtrain.optim's, or
    onnxtrain.optim's applied in backward (-in-backward)."""
    params = [p for p in model.parameters() if p.requires_grad]
    sgd = "sgd" in kind
    if kind.startswith("torch"):
        return torch.optim.SGD(params, lr=lr, momentum=0.9) if sgd else torch.optim.AdamW(params, lr=lr)
    make = onnxtrain.optim.SGD if sgd else onnxtrain.optim.AdamW
    return make(params, lr=lr, in_backward=kind.endswith("in-backward"), **({"momentum": 0.9} if sgd else {}))


@pytest.mark.parametrize("seed", SEEDS)
def test_random_model_steps_as_eager(seed):
    """Three optimizer steps, each of one or two micro-batches of new sizes, against eager's with PyTorch's optimizer
    of the same kind: every micro-batch's loss; after them every parameter (SGD's updates are linear in the gradients:
    as near eager's as those; AdamW's divide rounding noise by itself, so its parameters are compared through the
    losses), and the logits in eval mode without gradients."""
    d, shape, eager, mine, door, how = drawn(seed)
    kind = d.pick(OPTIMIZERS)
    micro = 1 if kind.endswith("in-backward") else 1 + d.below(2)
    theirs = optimizer("torch-sgd" if "sgd" in kind else "torch-adamw", eager, 1e-2)
    ours = optimizer(kind, mine, 1e-2)
    start = {n: p.detach().clone() for n, p in eager.named_parameters()}
    for step in range(3):
        for m in range(micro):
            batch = draw_batch(d, shape)
            where = f"seed {seed}, {how}, {kind}, step {step}, micro-batch {m}: {describe(shape, batch)}"
            losses = []
            for model in (eager, door):
                out = model(*batch)
                loss, _ = split(out)
                del out
                loss.backward()
                losses.append(loss.item())
            tolerance = 1e-5 if step == 0 else 1e-3
            assert losses[1] == pytest.approx(losses[0], rel=tolerance, abs=1e-6), f"{where}: loss"
        for opt in (theirs, ours):
            opt.step()
            opt.zero_grad(set_to_none=True)
    where = f"seed {seed}, {how}, {kind}, {micro} micro-batches a step: {shape}"
    if "sgd" in kind:
        for (name, p), q in zip(mine.named_parameters(), eager.parameters()):
            moved = float((q.detach() - start[name]).abs().max())
            off = float((p.detach() - q.detach()).abs().max())
            assert off <= 1e-3 * moved + 1e-7, f"{where}: {name} is {off:.2e} from eager's, which moved {moved:.2e}"
    eager.eval()
    door.eval()
    batch = draw_batch(d, shape)
    with torch.no_grad():
        want, got = eager(*batch), door(*batch)
    (want, _), (got, _) = split(want), split(got)
    assert got.item() == pytest.approx(want.item(), rel=1e-3), f"{where}: the loss in eval mode"
