"""Gradient checks against central finite differences in float64.

A case is one ONNX node: its float inputs are the values differentiated, the other inputs are
constants. The loss is sum_k sum(y_k * r_k) over the node's float outputs with fixed random r_k, so
that every output element contributes with its own weight.
"""

from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import helper, numpy_helper

import onnxtrain

OPSET = 20
SEED = 1  # random ops (dropout) draw the same numbers in every run of a check


@dataclass
class Case:
    op: str
    inputs: list  # float64 arrays (differentiated) or Const(...) (held fixed)
    attrs: dict = field(default_factory=dict)
    outputs: int = 1
    step: float = 1e-6
    rtol: float = 1e-5
    atol: float = 1e-7
    domain: str = ""
    opset: int = 0  # of the default domain; 0 for OPSET

    @property
    def label(self):
        shapes = ",".join("x".join(map(str, np.shape(i.value if isinstance(i, Const) else i))) for i in self.inputs)
        attrs = ",".join(f"{k}={v}" for k, v in sorted(self.attrs.items()))
        return f"{self.op}({shapes}){'[' + attrs + ']' if attrs else ''}"


@dataclass
class Const:
    value: np.ndarray


def _node_model(case, output_shapes=None):
    inputs, inits, names = [], [], []
    for i, x in enumerate(case.inputs):
        name = f"in{i}"
        if x is None:
            names.append("")
            continue
        names.append(name)
        if isinstance(x, Const):
            inits.append(numpy_helper.from_array(np.asarray(x.value), name))
        else:
            inputs.append(helper.make_tensor_value_info(name, onnx.TensorProto.DOUBLE, list(np.shape(x))))
    outs = [f"out{k}" for k in range(case.outputs)]
    nodes = [helper.make_node(case.op, names, outs, domain=case.domain, **case.attrs)]
    graph_outputs = [helper.make_tensor_value_info(o, onnx.TensorProto.UNDEFINED, None) for o in outs]
    if output_shapes is not None:  # the loss: sum_k sum(out_k * r_k) over float outputs
        rng = np.random.default_rng(7)
        terms = []
        for k, (o, shape) in enumerate(zip(outs, output_shapes)):
            if shape is None:
                continue
            inits.append(numpy_helper.from_array(rng.uniform(0.5, 1.5, shape), f"r{k}"))
            nodes.append(helper.make_node("Mul", [o, f"r{k}"], [f"w{k}"]))
            nodes.append(helper.make_node("ReduceSum", [f"w{k}"], [f"s{k}"], keepdims=0))
            terms.append(f"s{k}")
        nodes.append(helper.make_node("Sum", terms, ["loss"]))
        graph_outputs = [helper.make_tensor_value_info("loss", onnx.TensorProto.DOUBLE, [])]
    graph = helper.make_graph(nodes, "case", inputs, graph_outputs, initializer=inits)
    opsets = [helper.make_opsetid("", case.opset or OPSET)]
    opsets += [helper.make_opsetid(case.domain, 1)] if case.domain else []
    return helper.make_model(graph, opset_imports=opsets).SerializeToString()


def check(case):
    """Returns the largest error relative to the tolerance (<= 1 passes)."""
    feeds = {f"in{i}": np.array(x, dtype=np.float64) for i, x in enumerate(case.inputs)
             if x is not None and not isinstance(x, Const)}
    plain = onnxtrain.Session.from_bytes(_node_model(case))
    outs = plain.run(dict(feeds))
    shapes = [outs[f"out{k}"].shape if outs[f"out{k}"].dtype == np.float64 else None for k in range(case.outputs)]
    session = onnxtrain.Session.for_training(_node_model(case, shapes), list(feeds), "loss")

    def loss(f):
        out, _ = session.run_forward(f, seed=SEED)
        return float(out["loss"])

    _, state = session.run_forward(dict(feeds), seed=SEED)
    analytic = session.run_backward(state)
    worst = 0.0
    for name, x in feeds.items():
        numeric = np.zeros_like(x)
        for idx in np.ndindex(x.shape):
            plus, minus = dict(feeds), dict(feeds)
            plus[name], minus[name] = x.copy(), x.copy()
            plus[name][idx] += case.step
            minus[name][idx] -= case.step
            numeric[idx] = (loss(plus) - loss(minus)) / (2 * case.step)
        err = np.abs(analytic[name] - numeric) / (case.atol + case.rtol * np.abs(numeric))
        worst = max(worst, float(err.max()) if err.size else 0.0)
    return worst
