"""Norm gradient residual (norm_grad_residual.cpp): a Sum of a norm gradient's dX and the residual stream's gradient
goes into com.onnxtrain.LayerNormalizationGrad's or RMSNormalizationGrad's input `base`. The gradient with a base is
exactly the Sum of the gradient without one and the base; a base of another dtype or shape is refused; pre-norm
transformers (Llama's RMSNorm, GPT-2's LayerNorm) fold every such Sum, in float32 and under bf16 autocast."""

import glob

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper

import onnxtrain

transformers = pytest.importorskip("transformers")
OPSETS = [helper.make_opsetid("", 17), helper.make_opsetid("com.onnxtrain", 1)]
ROWS, N = 6, 40


def grad_inputs(op):
    """dY, X, the scale and the statistics of a norm over the last dim, as float32 arrays by input name."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((ROWS, N)).astype(np.float32)
    feeds = {"dy": rng.standard_normal((ROWS, N)).astype(np.float32), "x": x,
             "w": rng.uniform(0.5, 1.5, N).astype(np.float32)}
    if op == "LayerNormalizationGrad":
        feeds["mean"] = x.mean(axis=1, keepdims=True)
        feeds["rstd"] = (1 / np.sqrt(x.var(axis=1, keepdims=True) + 1e-5)).astype(np.float32)
    else:
        feeds["rstd"] = (1 / np.sqrt((x * x).mean(axis=1, keepdims=True) + 1e-5)).astype(np.float32)
    return feeds


def run(op, feeds, base=None, base_type=TensorProto.FLOAT):
    """op's dX on the CPU, with `base` as its input base where given."""
    names = list(feeds) + (["base"] if base is not None else [])
    outputs = ["dx", "dw"] + (["db"] if op == "LayerNormalizationGrad" else [])
    node = helper.make_node(op, names, outputs, domain="com.onnxtrain", axis=-1, epsilon=1e-5)
    inputs = [helper.make_tensor_value_info(k, TensorProto.FLOAT, list(v.shape)) for k, v in feeds.items()]
    if base is not None:
        inputs.append(helper.make_tensor_value_info("base", base_type, list(base.shape)))
    out = [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs]
    model = helper.make_model(helper.make_graph([node], "g", inputs, out), opset_imports=OPSETS)
    session = onnxtrain.Session.from_bytes(model.SerializeToString())
    run_feeds = {k: torch.from_numpy(v) for k, v in feeds.items()}
    if base is not None:
        run_feeds["base"] = base
    return torch.from_dlpack(session.run(run_feeds)["dx"])


@pytest.mark.parametrize("op", ["LayerNormalizationGrad", "RMSNormalizationGrad"])
def test_the_gradient_with_a_base_is_the_sum_of_the_gradient_and_the_base(op):
    feeds = grad_inputs(op)
    base = torch.randn(ROWS, N)
    assert torch.equal(run(op, feeds, base), run(op, feeds) + base)


@pytest.mark.parametrize("op", ["LayerNormalizationGrad", "RMSNormalizationGrad"])
def test_a_base_of_another_dtype_or_shape_is_refused(op):
    feeds = grad_inputs(op)
    with pytest.raises(onnxtrain.ShapeError, match=r"the base bfloat16 \[6, 40\] must be X's float32 \[6, 40\]"):
        run(op, feeds, torch.randn(ROWS, N).to(torch.bfloat16), TensorProto.BFLOAT16)
    with pytest.raises(onnxtrain.ShapeError, match=r"the base float32 \[6, 1\] must be X's float32 \[6, 40\]"):
        run(op, feeds, torch.randn(ROWS, 1))


def tiny(name):
    torch.manual_seed(0)
    if name == "llama":
        return transformers.LlamaForCausalLM(transformers.LlamaConfig(
            vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, use_cache=False))
    return transformers.GPT2LMHeadModel(transformers.GPT2Config(vocab_size=128, n_positions=32, n_embd=64, n_layer=2,
                                                                n_head=4, bos_token_id=0, eos_token_id=0,
                                                                use_cache=False))


@pytest.mark.parametrize("bf16", [True, False])
@pytest.mark.parametrize("name", ["llama", "gpt2"])
def test_a_pre_norm_transformers_residual_sums_fold_into_its_norm_gradients(name, bf16, tmp_path):
    model = onnxtrain.Module(tiny(name).train(), onnxtrain.Options(save_onnx=str(tmp_path)))
    ids = torch.randint(0, 128, (2, 16))
    with torch.autocast("cpu", torch.bfloat16, enabled=bf16):
        loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    assert torch.isfinite(loss) and all(torch.isfinite(p.grad).all() for p in model.parameters())
    graph = onnx.load(glob.glob(str(tmp_path / "*_train_optimized.onnx"))[0]).graph
    grads = [n for n in graph.node if n.op_type.endswith("NormalizationGrad") and n.domain == "com.onnxtrain"]
    slot = 5 if name == "gpt2" else 4
    based = [n for n in grads if len(n.input) > slot and n.input[slot]]
    # Every layer's two norms but the first's input norm (the embeddings' gradient is no Sum): 2 x 2 - 1 + the final.
    assert len(grads) == 5 and len(based) == 4
    dx = {n.output[0] for n in grads}
    assert not [n.name for n in graph.node if n.op_type == "Sum" and dx & set(n.input)]
