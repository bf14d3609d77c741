"""A training step's memory predicted before it runs: the peak equals the allocator's, and the largest batch
predicted to fit under a limit runs while the next one fails with the typed out-of-memory error."""

import json

import numpy as np
import onnx
import pytest
import torch

import onnxtrain
from export_util import export_training
from models import GPT, WithLoss

AXES = {"idx": {0: "batch", 1: "seq"}, "target": {0: "batch", 1: "seq"}}


@pytest.fixture(scope="module", params=["", "budget", "peak budget", "level 1", "level 2"])
def gpt(request, tmp_path_factory):
    torch.manual_seed(0)
    m = WithLoss(GPT(vocab=65, dim=32, heads=4, layers=2, block=32, dropout=0.1)).train()
    idx = torch.randint(0, 65, (4, 16))
    path = export_training(m, (idx, idx), str(tmp_path_factory.mktemp("gpt") / "m.onnx"), ["idx", "target"], AXES, ["loss"])
    model = onnx.load(path)
    params = {i.name: np.asarray(onnx.numpy_helper.to_array(i)) for i in model.graph.initializer}
    wrt = [n for n in params if n in dict(m.named_parameters())]
    options = {"": {}, "budget": dict(memory_budget="0.5", memory_dims={"batch": 4, "seq": 16}),
               "peak budget": dict(memory_budget="500KiB", memory_dims={"batch": 4, "seq": 16}),
               "level 1": dict(memory_level=1, memory_dims={"batch": 4, "seq": 16}),
               "level 2": dict(memory_level=2)}[request.param]  # (level 2 without dims: each dim taken as 128)
    session = onnxtrain.Session.for_training(model.SerializeToString(), wrt, "loss", **options)
    return session, params


def batch(b, t=16):
    idx = np.random.default_rng(b).integers(0, 65, (b, t))
    return {"idx": idx, "target": np.roll(idx, 1, 1)}


def train_step(session, params, feeds):
    out, state = session.run_forward(feeds, seed=1)  # the parameters are the model's initializers
    grads = session.run_backward(state)
    return out, grads


@pytest.mark.parametrize("b", [2, 6])
def test_predicted_peak_equals_the_allocators(gpt, b):
    session, params = gpt
    predicted = session.predict_memory({"batch": b, "seq": 16})
    onnxtrain.reset_peak_stats()
    base = onnxtrain.allocator_stats()["allocated"]
    out, grads = train_step(session, params, batch(b))
    measured = onnxtrain.allocator_stats()["peak_allocated"] - base
    assert measured == predicted["peak"]
    assert sum(predicted["at_peak"].values()) == predicted["peak"], "the peak broken down by category"
    assert predicted["stash"] > 0 and predicted["gradients"] == sum(g.nbytes for g in grads.values())
    assert predicted["parameters"] == sum(params[n].nbytes for n in session.grad_names)


def test_the_largest_batch_that_fits_runs_and_the_next_fails_cleanly(gpt):
    session, params = gpt
    dims = {"seq": 16}
    b = 5
    peak = session.predict_memory({**dims, "batch": b})["peak"]
    limit = session.predict_memory({**dims, "batch": b})["parameters"] + peak
    assert session.largest_fitting("batch", dims, limit) == b
    base = onnxtrain.allocator_stats()["allocated"]
    onnxtrain.set_memory_limit(base + peak)
    try:
        train_step(session, params, batch(b))
        with pytest.raises(onnxtrain.OutOfMemoryError, match="out of memory: request of"):
            train_step(session, params, batch(b + 1))
    finally:
        onnxtrain.set_memory_limit(0)


def test_a_recorded_step_matches_its_prediction(gpt):
    session, params = gpt
    dims = {"batch": 3, "seq": 16}
    session.start_memory_recording()
    train_step(session, params, batch(3))
    t = json.loads(session.stop_memory_recording(dims))
    assert t["source"] == "measured" and t["measured_peak"] == t["predicted_peak"] > 0
    categories = {e["category"] for e in t["events"]}
    assert {"stash", "gradient", "transient"} <= categories
    assert ("recompute" in categories) == bool(session.memory_report().count("ON ("))
    stashed = [e for e in t["events"] if e["category"] == "stash" and e["bytes"] > 0]
    assert all(e["value"] and e["step"] < t["boundary"] for e in stashed)
    steps = t["steps"]
    assert len(steps) > t["boundary"] and steps[0]["node"] and steps[-1]["part"] == "backward"
    assert max(sum(s["live"].values()) for s in steps) == t["measured_peak"]
