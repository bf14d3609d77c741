"""A training step's memory predicted before it runs: the peak equals the allocator's, and the largest batch
predicted to fit under a limit runs while the next one fails with the typed out-of-memory error."""

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
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
    path = export_training(m, (idx, idx), str(tmp_path_factory.mktemp("gpt") / "m.onnx"), ["idx", "target"], AXES,
                           ["loss"])
    model = onnx.load(path)
    params = {i.name: np.asarray(onnx.numpy_helper.to_array(i)) for i in model.graph.initializer}
    wrt = [n for n in params if n in dict(m.named_parameters())]
    options = {"": {}, "budget": dict(memory_budget="0.5", memory_dims={"batch": 4, "seq": 16}),
               "peak budget": dict(memory_budget="500KiB", memory_dims={"batch": 4, "seq": 16}),
               "level 1": dict(memory_level=1, memory_dims={"batch": 4, "seq": 16}),
               "level 2": dict(memory_level=2)}[request.param]  # (level 2 without dims: each dim taken as 128)
    options = onnxtrain.SessionOptions(**options)
    session = onnxtrain.Session.for_training(model.SerializeToString(), wrt, "loss", options)
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


class SegNet(torch.nn.Module):
    """Conv, BatchNorm, max pooling, Resize (bilinear up-sampling) and a per-pixel loss: kernels with scratch
    (im2col, the resampling stages, the loss's per-element terms) whose bytes the plan counts."""

    def __init__(self, classes=4):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.conv2 = torch.nn.Conv2d(8, 8, 3, padding=1)
        self.head = torch.nn.Conv2d(8, classes, 1)

    def forward(self, x, target):  # x: (B, 3, H, W), target: (B, H, W)
        h = torch.nn.functional.max_pool2d(torch.relu(self.bn(self.conv1(x))), 2)
        h = torch.nn.functional.interpolate(torch.relu(self.conv2(h)), scale_factor=2, mode="bilinear")
        return torch.nn.functional.cross_entropy(self.head(h), target)


@pytest.fixture(scope="module")
def segnet(tmp_path_factory):
    torch.manual_seed(0)
    m = SegNet().train()
    x, target = torch.randn(2, 3, 8, 8), torch.randint(0, 4, (2, 8, 8))
    axes = {"x": {0: "batch", 2: "h", 3: "w"}, "target": {0: "batch", 1: "h", 2: "w"}}
    path = export_training(m, (x, target), str(tmp_path_factory.mktemp("segnet") / "m.onnx"), ["x", "target"], axes,
                           ["loss"])
    model = onnx.load(path)
    ops = {n.op_type for n in model.graph.node}
    assert {"Conv", "BatchNormalization", "MaxPool", "Resize", "SoftmaxCrossEntropyLoss"} <= ops
    wrt = [i.name for i in model.graph.initializer if i.name in dict(m.named_parameters())]
    return model.SerializeToString(), wrt


def seg_batch(b, side):
    rng = np.random.default_rng(side)
    return {"x": rng.standard_normal((b, 3, side, side)).astype(np.float32),
            "target": rng.integers(0, 4, (b, side, side))}


def measured_peak(run):
    onnxtrain.reset_peak_stats()
    base = onnxtrain.allocator_stats()["allocated"]
    run()
    return onnxtrain.allocator_stats()["peak_allocated"] - base


@pytest.mark.parametrize("b,side", [(2, 16), (3, 24)])
def test_cnn_forward_peak_equals_the_allocators(segnet, b, side):
    session = onnxtrain.Session.from_bytes(segnet[0])
    feeds = seg_batch(b, side)
    predicted = session.predicted_peak({"x": [b, 3, side, side], "target": [b, side, side]})
    assert measured_peak(lambda: session.run(feeds)) == predicted


@pytest.mark.parametrize("b,side", [(2, 16), (3, 24)])
def test_cnn_training_peak_equals_the_allocators(segnet, b, side):
    model, wrt = segnet
    session = onnxtrain.Session.for_training(model, wrt, "loss")
    predicted = session.predict_memory({"batch": b, "h": side, "w": side})
    assert predicted["at_peak"].get("scratch", 0) >= 0
    assert measured_peak(lambda: train_step(session, None, seg_batch(b, side))) == predicted["peak"]


def test_kernel_scratch_is_its_own_category(segnet):
    model, wrt = segnet
    session = onnxtrain.Session.for_training(model, wrt, "loss")
    dims = {"batch": 2, "h": 16, "w": 16}
    session.start_memory_recording()
    train_step(session, None, seg_batch(2, 16))
    t = json.loads(session.stop_memory_recording(dims))
    assert t["measured_peak"] == t["predicted_peak"]
    scratch = [e for e in t["events"] if e["category"] == "scratch" and e["bytes"] > 0]
    assert scratch and all(not e["value"] for e in scratch)
    predicted = json.loads(session.memory_timeline(dims))
    assert any(s["live"].get("scratch", 0) > 0 for s in predicted["steps"])


@pytest.mark.parametrize("b", [2, 5])
def test_gpt_forward_peak_equals_the_allocators(tmp_path, b):
    torch.manual_seed(0)
    m = WithLoss(GPT(vocab=65, dim=32, heads=4, layers=2, block=32, dropout=0.1)).train()
    idx = torch.randint(0, 65, (2, 16))
    path = export_training(m, (idx, idx), str(tmp_path / "m.onnx"), ["idx", "target"], AXES, ["loss"])
    session = onnxtrain.Session.from_bytes(onnx.load(path).SerializeToString())
    predicted = session.predicted_peak({"idx": [b, 16], "target": [b, 16]})
    assert predicted and measured_peak(lambda: session.run(batch(b))) == predicted


def reshaped_model(target):
    """x (batch, 8) @ W, reshaped to the shape `target`'s nodes compute from the product's (into 'target'), then
    Relu and the sum of squares as the loss."""
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((8, 8)).astype(np.float32), "W")
    nodes = [helper.make_node("MatMul", ["x", "W"], ["y"]), helper.make_node("Shape", ["y"], ["shape"]), *target,
             helper.make_node("Reshape", ["y", "target"], ["r"]), helper.make_node("Relu", ["r"], ["z"]),
             helper.make_node("Mul", ["z", "z"], ["zz"]), helper.make_node("ReduceSum", ["zz"], ["loss"], keepdims=0)]
    graph = helper.make_graph(nodes, "reshaped", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
                              [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    return onnxtrain.Session.for_training(model.SerializeToString(), ["W"], "loss")


def test_a_shape_computed_in_floats_is_bound_as_the_recorded_step_meets_it():
    """A Reshape to (2 batch, 4) computed through floats: shape inference gives its dims symbols of their own, which
    only the run binds. The recorded step's prediction takes them from the shapes it met (it raised before)."""
    session = reshaped_model([
        helper.make_node("Cast", ["shape"], ["f"], to=TensorProto.FLOAT),
        helper.make_node("Constant", [], ["k"], value=numpy_helper.from_array(np.array([2, 0.5], np.float32))),
        helper.make_node("Mul", ["f", "k"], ["g"]),
        helper.make_node("Cast", ["g"], ["target"], to=TensorProto.INT64)])
    with pytest.raises(onnxtrain.ConfigError, match="needs dims that were not given"):
        session.predict_memory({"batch": 3})
    session.start_memory_recording()
    train_step(session, None, {"x": np.ones((3, 8), np.float32)})
    t = json.loads(session.stop_memory_recording({"batch": 3}))
    assert t["measured_peak"] == t["predicted_peak"] > 0


def test_sizes_divided_and_raised_to_a_power_stay_symbolic():
    """TorchDynamo writes a batch dim as (b**2) // b: Pow by a constant and Div by a size fold into b, so the
    Reshape's shape is known (no symbols of its own) and the step's memory predicted from the inputs' dims alone."""
    def const(name, values):
        return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.array(values)))

    session = reshaped_model([
        const("zero", [0]), const("one", [1]), const("two", 2), const("eight", [8]),
        helper.make_node("Slice", ["shape", "zero", "one"], ["b"]),
        helper.make_node("Pow", ["b", "two"], ["b2"]), helper.make_node("Div", ["b2", "b"], ["b_again"]),
        helper.make_node("Concat", ["b_again", "eight"], ["target"], axis=0)])
    predicted = session.predict_memory({"batch": 3})
    assert measured_peak(lambda: train_step(session, None, {"x": np.ones((3, 8), np.float32)})) == predicted["peak"]
