"""Recompute plans chosen by config: bit-identical gradients with dropout on, smaller stash, the config
grammar's count and duplicate rules, and every config error quoting its entry."""

import json
import re

import numpy as np
import onnx
import pytest
import torch

import onnxtrain
from export_util import export_training
from models import BERT, GPT, WithLoss

AXES = {"idx": {0: "batch", 1: "seq"}, "target": {0: "batch", 1: "seq"}}


def exported(name, tmp_path_factory):
    torch.manual_seed(0)
    d = tmp_path_factory.mktemp(name)
    if name == "gpt":
        m = WithLoss(GPT(vocab=65, dim=32, heads=4, layers=2, block=32, dropout=0.1)).train()
        idx = torch.randint(0, 65, (4, 16))
        path = export_training(m, (idx, idx), str(d / "m.onnx"), ["idx", "target"], AXES, ["loss"])
        feeds = {"idx": idx.numpy(), "target": torch.roll(idx, 1, 1).numpy()}
    else:
        m = WithLoss(BERT(vocab=100, dim=32, heads=4, layers=2, block=32, dropout=0.1)).train()
        idx = torch.randint(0, 100, (4, 16))
        mask = torch.ones(4, 16)
        mask[1, 10:] = 0
        axes = {**AXES, "mask": {0: "batch", 1: "seq"}}
        path = export_training(m, (idx, mask, idx), str(d / "m.onnx"), ["idx", "mask", "target"], axes, ["loss"])
        feeds = {"idx": idx.numpy(), "mask": mask.numpy(), "target": torch.roll(idx, 1, 1).numpy()}
    model = onnx.load(path)
    wrt = [i.name for i in model.graph.initializer if i.name in dict(m.named_parameters())]
    return model.SerializeToString(), wrt, feeds


def training(model, wrt, **options):
    return onnxtrain.Session.for_training(model, wrt, "loss", onnxtrain.SessionOptions(**options))


@pytest.fixture(scope="module", params=["gpt", "bert"])
def model(request, tmp_path_factory):
    return exported(request.param, tmp_path_factory)


def clusters(session):
    return sorted({line.split(" | ")[0] for line in session.memory_report().splitlines()[1:] if " | " in line})


def step(session, feeds):
    _, state = session.run_forward(feeds, seed=11)
    stash = state.stash_bytes
    return session.run_backward(state), stash


def test_every_plan_keeps_gradients_bit_identical_and_stashes_less(model):
    b, wrt, feeds = model
    plain = training(b, wrt)
    want, stash = step(plain, feeds)
    config = ",".join(f"{c}:1:-1" for c in clusters(plain))
    planned = training(b, wrt, memory_config=config)
    got, less = step(planned, feeds)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
    assert less < stash
    report = json.loads(planned.memory_report({"batch": 4, "seq": 16}, json=True))
    assert all(r["applied"] == r["frequency"] and r["bytes_evaluated"] > 0 for r in report["clusters"])


def test_level_0_stashes_by_size_with_identical_gradients(model):
    """At every level the plans that cost at most a flop per byte they save (a normalization's output recomputed from
    the input its gradient keeps) replace their activations, unless the config names their cluster."""
    b, wrt, feeds = model
    plain = training(b, wrt)
    got, stash = step(plain, feeds)
    report = json.loads(plain.memory_report({"batch": 4, "seq": 16}, json=True))
    taken = sorted({r["cluster"] for r in report["clusters"] if r["applied"]})
    assert report["every_level"] >= 4 and report["every_level_bytes_evaluated"] > 0 and taken, report
    assert "every level: " in plain.memory_report()
    stashing = training(b, wrt, memory_config=",".join(f"{c}:0:0" for c in taken))
    want, more = step(stashing, feeds)
    assert json.loads(stashing.memory_report(json=True))["every_level"] == 0
    assert more - stash >= report["every_level_bytes_evaluated"] * 0.9, (more, stash)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)


def applied(session, cluster):
    clusters = json.loads(session.memory_report(json=True))["clusters"]
    return sum(r["applied"] for r in clusters if r["cluster"] == cluster)


def test_count_applies_the_first_n_and_the_last_duplicate_wins(model):
    b, wrt, _ = model
    assert applied(training(b, wrt, memory_config="LayerNormalization+:1:2"),
                   "LayerNormalization+") == 2
    assert applied(training(b, wrt, memory_config="Gelu+:1:-1, Gelu+:0:0"), "Gelu+") == 0
    assert applied(training(b, wrt, memory_config="Gelu+:0:0,Gelu+:1:-1"), "Gelu+") == 2


def test_config_from_a_json_file(model, tmp_path):
    b, wrt, _ = model
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(["Gelu+:1:1"]))
    assert applied(training(b, wrt, memory_config=str(path)), "Gelu+") == 1


@pytest.mark.parametrize("config,message", [
    ("Gelu+", "'Gelu+': expected ClusterId:Strategy:Count"),
    ("Gelu+:3:-1", "'Gelu+:3:-1': strategy '3' is not 0 (off), 1 (recompute) or 2 (recompute with compromise)"),
    ("Gelu+:1:x", "'Gelu+:1:x': count 'x' is not -1"),
    ("Gelu+:1:-2", "count '-2'"),
    (":1:-1", "empty cluster id"),
    ("missing_plan.json", "memory config file 'missing_plan.json' cannot be read"),
])
def test_config_errors_quote_the_entry(model, config, message):
    b, wrt, _ = model
    with pytest.raises(onnxtrain.ConfigError) as e:
        training(b, wrt, memory_config=config)
    assert message in str(e.value)


def test_a_json_file_that_is_not_a_list_of_strings(model, tmp_path):
    b, wrt, _ = model
    path = tmp_path / "bad.json"
    path.write_text('{"Gelu+": 1}')
    with pytest.raises(onnxtrain.ConfigError, match="not a JSON array of strings"):
        training(b, wrt, memory_config=str(path))


@pytest.mark.parametrize("fraction", [0.5, 0.25])
def test_a_stash_budget_is_met_at_least_flops_with_identical_gradients(model, fraction):
    b, wrt, feeds = model
    dims = {"batch": 4, "seq": 16}
    plain = training(b, wrt)
    want, stash = step(plain, feeds)
    planned = training(b, wrt, memory_budget=str(fraction), memory_dims=dims)
    got, kept = step(planned, feeds)
    report = planned.memory_report(dims)
    assert f"budget {fraction * 100:g}% of the stash" in report and "missed" not in report, report
    assert kept <= fraction * stash * 1.02 + 4096, (kept, stash)  # allocation rounding aside
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)


def test_an_impossible_budget_says_by_how_much_it_misses(model):
    b, wrt, _ = model
    # (the loss keeps its scores and their log-sum-exp, both recomputable: a 1% stash is within reach)
    planned = training(b, wrt, memory_budget="0.0001",
                                             memory_dims={"batch": 4, "seq": 16})
    assert "missed by" in planned.memory_report()


def test_a_budget_needs_the_batch_dims(model):
    b, wrt, _ = model
    with pytest.raises(onnxtrain.ConfigError, match="needs dims that were not given"):
        training(b, wrt, memory_budget="0.5")


@pytest.mark.parametrize("layers", [2, 6])
@pytest.mark.parametrize("arch", ["gpt", "bert"])
def test_layer_detection_finds_every_transformer_layer(arch, layers, tmp_path):
    torch.manual_seed(0)
    if arch == "gpt":
        m = WithLoss(GPT(vocab=65, dim=32, heads=4, layers=layers, block=32)).train()
        idx = torch.randint(0, 65, (2, 8))
        args, names, axes = (idx, idx), ["idx", "target"], AXES
    else:
        m = WithLoss(BERT(vocab=100, dim=32, heads=4, layers=layers, block=32)).train()
        idx = torch.randint(0, 100, (2, 8))
        args, names = (idx, torch.ones(2, 8), idx), ["idx", "mask", "target"]
        axes = {**AXES, "mask": {0: "batch", 1: "seq"}}
    model = onnx.load(export_training(m, args, str(tmp_path / "m.onnx"), names, axes, ["loss"]))
    wrt = [i.name for i in model.graph.initializer if i.name in dict(m.named_parameters())]
    session = onnxtrain.Session.for_training(model.SerializeToString(), wrt, "loss")
    assert session.transformer_layers() == layers


def recomputes_a_projection(session):
    """Whether a recompute plan the session applies runs a projection (a Linear)."""
    rows = [line.split(" | ") for line in session.memory_report().splitlines()[1:] if " | " in line]
    return any("Linear" in r[0].split("+") for r in rows if r[3].startswith("ON"))


def test_levels_recompute_inside_layers_with_identical_gradients(model):
    """Level 1 is layer-wise checkpointing (every plain plan inside the layers, projections included: all but the
    layers' inputs recomputed), level 2 adds the compromised plans: each stashes no more than the level before."""
    b, wrt, feeds = model
    plain = training(b, wrt)
    want, stash = step(plain, feeds)
    dims = {"batch": 4, "seq": 16}
    layered = training(b, wrt, memory_level=1, memory_dims=dims)
    got, kept = step(layered, feeds)
    assert "level 1: 2 transformer layers" in layered.memory_report()
    assert kept < 0.5 * stash and recomputes_a_projection(layered), layered.memory_report()
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
    level2 = training(b, wrt, memory_level=2, memory_dims=dims)
    got2, kept2 = step(level2, feeds)
    assert "level 2: 2 transformer layers" in level2.memory_report()
    assert kept2 <= kept, level2.memory_report()
    for name in want:
        np.testing.assert_array_equal(got2[name], want[name], err_msg=name)
    with pytest.raises(onnxtrain.ConfigError, match="level 3 is not 0, 1 or 2"):
        training(b, wrt, memory_level=3)


def test_a_budget_on_the_step_peak_is_met_with_identical_gradients(model):
    b, wrt, feeds = model
    dims = {"batch": 4, "seq": 16}
    plain = training(b, wrt)
    want, _ = step(plain, feeds)
    before = plain.predict_memory(dims)["total"]
    # (the lowest peak the budget's ladder reaches: a budget of a byte takes its every rung)
    everything = training(b, wrt, memory_budget="1B", memory_dims=dims).predict_memory(dims)["total"]
    budget = (before + everything) // 2
    planned = training(b, wrt, memory_budget=f"{budget}B", memory_dims=dims)
    report = planned.memory_report(dims)
    assert planned.predict_memory(dims)["total"] <= budget < before, report
    unplanned = plain.predict_memory(dims, without_plans=True)["total"]
    assert planned.predict_memory(dims, without_plans=True)["total"] == unplanned
    assert "for the step's peak" in report and "missed" not in report, report
    got, _ = step(planned, feeds)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
    tiny = training(b, wrt, memory_budget="1KiB", memory_dims=dims)
    assert "missed by" in tiny.memory_report(dims)


@pytest.mark.parametrize("text", ["6 GiB", "-1", "1.5", "abc", "0.3GiB?"])
def test_a_malformed_budget_is_a_config_error_quoting_it(model, text):
    b, wrt, _ = model
    with pytest.raises(onnxtrain.ConfigError, match="memory budget '" + re.escape(text) + "'"):
        training(b, wrt, memory_budget=text, memory_dims={"batch": 4, "seq": 16})


def measured_step_peak(session, feeds):
    """The allocator's peak over one training step, above what was allocated before it."""
    onnxtrain.reset_peak_stats()
    base = onnxtrain.allocator_stats()["allocated"]
    step(session, feeds)
    return onnxtrain.allocator_stats()["peak_allocated"] - base


def test_what_a_budget_budgets_never_rises_as_it_falls(model):
    """A sweep of step-peak budgets (from no plan's peak to below what any plan reaches): each tighter budget's
    measured peak is at most the looser one's (torch.compile's activation memory budget is not monotone: pytorch
    issue 197838); a sweep of stash budgets: the measured stash likewise."""
    b, wrt, feeds = model
    dims = {"batch": 4, "seq": 16}
    hi = training(b, wrt).predict_memory(dims)["total"]
    lo = training(b, wrt, memory_budget="1B", memory_dims=dims).predict_memory(dims)["total"]
    peaks = []
    for k in range(10, -4, -1):
        budget = f"{int(lo + (hi - lo) * k / 10)}B"
        peaks.append((budget, measured_step_peak(training(b, wrt, memory_budget=budget, memory_dims=dims), feeds)))
    assert all(t[1] <= l[1] for l, t in zip(peaks, peaks[1:])) and peaks[-1][1] < peaks[0][1], str(peaks)
    stashes = []
    for fraction in np.linspace(1.0, 0.05, 12):
        session = training(b, wrt, memory_budget=f"{fraction:.2f}", memory_dims=dims)
        stashes.append((f"{fraction:.2f}", step(session, feeds)[1]))
    assert all(t[1] <= l[1] for l, t in zip(stashes, stashes[1:])) and stashes[-1][1] < stashes[0][1], str(stashes)


def test_session_options_are_checked_when_set():
    o = onnxtrain.SessionOptions(memory_config="Gelu+:1:-1, LayerNormalization+:0:0", memory_budget="1KiB",
                                 memory_dims={"batch": 4}, memory_level=1, applied_in_backward={"w"})
    assert o.memory_config == "Gelu+:1:-1, LayerNormalization+:0:0"
    assert (o.memory_budget, o.memory_dims, o.memory_level, o.applied_in_backward) == ("1KiB", {"batch": 4}, 1, {"w"})
    o.memory_budget = "0.25"
    assert o.memory_budget == "0.25" and o.device == "cpu" and "memory_budget='0.25'" in repr(o)
    with pytest.raises(onnxtrain.ConfigError, match=r"'Gelu\+:5:1'"):
        o.memory_config = "Gelu+:5:1"
    assert o.memory_config == "Gelu+:1:-1, LayerNormalization+:0:0"  # (a rejected value changes nothing)
    with pytest.raises(onnxtrain.ConfigError):
        o.memory_budget = "lots"
    with pytest.raises(onnxtrain.InputError, match="'tpu'"):
        onnxtrain.SessionOptions(device="tpu")
    with pytest.raises(TypeError):
        onnxtrain.SessionOptions("cpu")  # (keywords only)
