"""Dropout fusion (dropout_fusion.cpp): a 16-bit Dropout whose output autocast widens to float32 writes float32
itself, and a Dropout joining a residual stream adds the residual itself. com.onnxtrain.Dropout with attribute `to`
gives exactly the Cast of ONNX's Dropout (the mask applied in 16 bits), with a residual exactly the residual's sum with
it; com.onnxtrain.DropoutGrad with `to` exactly its gradient of the narrowed dY; GPT-2's residual dropouts fold with
their residual Adds (and under bf16 autocast their Casts, forward and backward) and train."""

import onnx
import pytest
import torch
from onnx import TensorProto, helper

import onnxtrain

transformers = pytest.importorskip("transformers")
OPSETS = [helper.make_opsetid("", 17), helper.make_opsetid("com.onnxtrain", 1)]


def run(op, x, out_type, domain="", residual=None, **attrs):
    """op (Dropout or DropoutGrad, seed 7, ratio 0.3, training) on the array x (and a residual), its output of
    out_type."""
    ratio = helper.make_tensor("ratio", TensorProto.FLOAT, [], [0.3])
    training = helper.make_tensor("training", TensorProto.BOOL, [], [True])
    node = helper.make_node(op, ["x", "ratio", "training"] + (["r"] if residual is not None else []), ["y"],
                            domain=domain, seed=7, **attrs)
    kind = {torch.bfloat16: TensorProto.BFLOAT16, torch.float16: TensorProto.FLOAT16, torch.float32: TensorProto.FLOAT}
    inputs = [helper.make_tensor_value_info("x", kind[x.dtype], list(x.shape))]
    feeds = {"x": x}
    if residual is not None:
        inputs.append(helper.make_tensor_value_info("r", kind[residual.dtype], list(residual.shape)))
        feeds["r"] = residual
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("y", out_type, list(x.shape))],
                              [ratio, training])
    session = onnxtrain.Session.from_bytes(helper.make_model(graph, opset_imports=OPSETS).SerializeToString())
    return torch.from_dlpack(session.run(feeds)["y"])


def test_the_dropout_widened_is_the_cast_of_the_dropout_in_sixteen_bits():
    x = torch.randn(3, 1000).to(torch.bfloat16)
    want = run("Dropout", x, TensorProto.BFLOAT16).float()
    got = run("Dropout", x, TensorProto.FLOAT, domain="com.onnxtrain", to=TensorProto.FLOAT)
    assert got.dtype == torch.float32 and torch.equal(got, want)
    assert 0.2 < float((got == 0).float().mean()) < 0.4


@pytest.mark.parametrize("widened", [True, False])
def test_a_residual_is_added_to_the_dropout(widened):
    x, residual = torch.randn(3, 1000).to(torch.bfloat16 if widened else torch.float32), torch.randn(3, 1000)
    want = residual + run("Dropout", x, TensorProto.BFLOAT16 if widened else TensorProto.FLOAT).float()
    to = dict(to=TensorProto.FLOAT) if widened else {}
    got = run("Dropout", x, TensorProto.FLOAT, domain="com.onnxtrain", residual=residual, **to)
    assert torch.equal(got, want)
    if not widened:
        return
    with pytest.raises(onnxtrain.ShapeError, match=r"the residual bfloat16 \[3, 1000\] must be the output's float32"):
        run("Dropout", x, TensorProto.FLOAT, domain="com.onnxtrain", residual=x, to=TensorProto.FLOAT)


def test_the_gradient_narrowed_is_the_gradient_of_the_narrowed_dy():
    dy = torch.randn(3, 1000)
    want = run("DropoutGrad", dy.to(torch.bfloat16), TensorProto.BFLOAT16, domain="com.onnxtrain")
    got = run("DropoutGrad", dy, TensorProto.BFLOAT16, domain="com.onnxtrain", to=TensorProto.BFLOAT16)
    assert got.dtype == torch.bfloat16 and torch.equal(got, want)
    forward = run("Dropout", dy.to(torch.bfloat16), TensorProto.BFLOAT16)
    assert torch.equal(got == 0, forward == 0)  # (the forward's mask)


@pytest.mark.parametrize("op", ["Dropout", "DropoutGrad"])
def test_an_output_dtype_other_than_the_inputs_or_float32_beside_sixteen_bits_is_refused(op):
    with pytest.raises(onnxtrain.ShapeError, match=r"attribute to \(10\) with an input of bfloat16"):
        run(op, torch.randn(4).to(torch.bfloat16), TensorProto.FLOAT16, domain="com.onnxtrain", to=TensorProto.FLOAT16)


@pytest.mark.parametrize("bf16", [True, False])
def test_gpt2s_residual_dropouts_fold(bf16, tmp_path):
    c = transformers.GPT2Config(vocab_size=100, n_positions=32, n_embd=64, n_layer=2, n_head=4, resid_pdrop=0.1,
                                embd_pdrop=0.1, attn_pdrop=0.1, use_cache=False)
    torch.manual_seed(0)
    model = onnxtrain.Module(transformers.GPT2LMHeadModel(c).train(), onnxtrain.Options(save_onnx=str(tmp_path)))
    ids = torch.randint(0, 100, (2, 16))
    with torch.autocast("cpu", torch.bfloat16, enabled=bf16):
        loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    assert torch.isfinite(loss)
    assert all(torch.isfinite(p.grad).all() for p in model.parameters())
    graph = onnx.load(next(tmp_path.glob("*_train_optimized.onnx"))).graph
    made = {o: n for n in graph.node for o in n.output}
    types = {v.name: v.type.tensor_type.elem_type for v in graph.value_info}
    to = lambda n: next((a.i for a in n.attribute if a.name == "to"), None)  # noqa: E731
    folded = [n for n in graph.node if n.op_type == "Dropout" and n.domain == "com.onnxtrain"]
    assert len(folded) == 2 * c.n_layer and all(to(n) == (TensorProto.FLOAT if bf16 else None) for n in folded)
    assert all(len(n.input) == 4 and types[n.input[3]] == TensorProto.FLOAT for n in folded)  # (the residual)
    outputs = {n.output[0] for n in graph.node if n.op_type == "Dropout"}
    assert not [n.name for n in graph.node if n.op_type in ("Cast", "Add") and n.input[0] in outputs]
    assert not [n.name for n in graph.node if n.op_type == "Add" and n.input[1] in outputs]
    if not bf16:
        return
    grads = [n for n in graph.node if n.op_type == "DropoutGrad" and to(n) == TensorProto.BFLOAT16]
    assert len(grads) == len(folded)
    for n in grads:  # dY as the residual's float32 sum writes it, not narrowed by a Cast
        assert types[n.input[0]] == TensorProto.FLOAT and made[n.input[0]].op_type != "Cast"


@pytest.mark.parametrize("bf16", [True, False])
def test_level_one_finds_the_layers_whose_residual_adds_went_into_dropouts(bf16):
    c = transformers.GPT2Config(vocab_size=100, n_positions=32, n_embd=64, n_layer=2, n_head=4, resid_pdrop=0.1,
                                embd_pdrop=0.1, attn_pdrop=0.1, use_cache=False)
    torch.manual_seed(0)
    model = onnxtrain.Module(transformers.GPT2LMHeadModel(c).train(), onnxtrain.Options(memory_opt_level=1))
    ids = torch.randint(0, 100, (2, 16))
    with torch.autocast("cpu", torch.bfloat16, enabled=bf16):
        model(input_ids=ids, labels=ids).loss.backward()
    assert "level 1: 2 transformer layers" in model.memory_report()
