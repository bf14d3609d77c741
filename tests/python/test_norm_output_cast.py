"""A float32 norm whose output autocast casts to bf16 for a product writes bf16 itself (norm_output_cast.cpp):
GPT-2's LayerNorm before its Conv1D (the output viewed as rows, its size read by Shape), Llama's RMSNorm before its
Linear. No Cast reads a norm's output (nor its view) and the norm and its gradient take bf16 as they come; the loss
and every gradient as eager's, under bf16 autocast and in float32 (where nothing is cast, so nothing folds)."""

import onnx
import pytest
import torch

import onnxtrain


class Conv1D(torch.nn.Module):  # transformers' GPT-2 Conv1D: the input viewed as rows, addmm, viewed back
    def __init__(self, nf, nx):
        super().__init__()
        self.nf = nf
        self.weight = torch.nn.Parameter(0.2 * torch.randn(nx, nf))
        self.bias = torch.nn.Parameter(0.1 * torch.randn(nf))

    def forward(self, x):
        size_out = x.size()[:-1] + (self.nf,)
        return torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight).view(size_out)


class LlamaNorm(torch.nn.Module):  # LlamaRMSNorm
    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.weight, self.eps = torch.nn.Parameter(1 + 0.1 * torch.randn(d)), eps

    def forward(self, x):
        dtype = x.dtype
        h = x.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(dtype)


class Block(torch.nn.Module):  # tokens' embeddings (float32 under autocast, their width known), a norm, a product
    def __init__(self, style, d=24):
        super().__init__()
        self.style = style
        self.embed = torch.nn.Embedding(50, d)
        self.norm = torch.nn.LayerNorm(d) if style == "gpt2" else LlamaNorm(d)
        self.proj = Conv1D(d, d) if style == "gpt2" else torch.nn.Linear(d, d, bias=False)

    def forward(self, ids):
        x = self.embed(ids)
        h = x + self.proj(self.norm(x)).float()  # (a residual stream stays float32 under autocast)
        return h.sin().sum() * 0.1


def step(style, bf16, tmp_path):
    """The optimized training graph, after checking the step against eager's."""
    torch.manual_seed(0)
    eager = Block(style)
    ours = onnxtrain.Module(Block(style), onnxtrain.Options(save_onnx=str(tmp_path)))
    ours.load_state_dict(eager.state_dict())
    ids = torch.randint(0, 50, (2, 5))
    with torch.autocast("cpu", torch.bfloat16, enabled=bf16):
        got, want = ours(ids), eager(ids)
    got.backward()
    want.backward()
    torch.testing.assert_close(got, want, **(dict(rtol=2e-2, atol=2e-3) if bf16 else dict(rtol=1e-5, atol=1e-6)))
    for (name, a), b in zip(ours.named_parameters(), eager.parameters()):
        a, b = a.grad, b.grad
        if bf16:
            cos = torch.nn.functional.cosine_similarity(a.flatten().double(), b.flatten().double(), dim=0)
            assert cos >= 0.999, name
        else:
            torch.testing.assert_close(a, b, rtol=0, atol=1e-4 * b.abs().max().item(), msg=name)
    return onnx.load(str(tmp_path / "Block_train_optimized.onnx")).graph


@pytest.mark.parametrize("style", ["gpt2", "llama"])
@pytest.mark.parametrize("bf16", [False, True])
def test_a_norm_writes_the_bf16_output_autocast_casts_it_to(style, bf16, tmp_path):
    graph = step(style, bf16, tmp_path)
    norm = "LayerNormalization" if style == "gpt2" else "RMSNormalization"
    norms = [n for n in graph.node if n.op_type == norm]
    assert norms, [n.op_type for n in graph.node]
    to = [next((a.i for a in n.attribute if a.name == "to"), None) for n in norms]
    assert to == [onnx.TensorProto.BFLOAT16 if bf16 else None] * len(norms), to
    made = {o: n for n in graph.node for o in n.output}
    outputs = {n.output[0] for n in norms}
    outputs |= {n.output[0] for n in graph.node if n.op_type == "Reshape" and n.input[0] in outputs}
    casts = [n.name for n in graph.node if n.op_type == "Cast" and n.input[0] in outputs]
    assert not casts, casts
    grad = [n for n in graph.node if n.op_type == norm + "Grad"]
    types = {v.name: v.type.tensor_type.elem_type for v in graph.value_info}
    assert len(grad) == 1 and types[grad[0].input[0]] == (onnx.TensorProto.BFLOAT16 if bf16 else onnx.TensorProto.FLOAT)
    assert made[grad[0].input[0]].op_type != "Cast"  # (dY as the product writes it)


@pytest.mark.parametrize("op", ["LayerNormalization", "RMSNormalization"])
def test_a_norms_output_dtype_must_be_xs_or_sixteen_bits_beside_float32(op):
    from onnx import TensorProto, helper

    node = helper.make_node(op, ["x", "w"], ["y"], domain="com.onnxtrain", to=TensorProto.INT64)
    graph = helper.make_graph([node], "norm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4]),
                                               helper.make_tensor_value_info("w", TensorProto.FLOAT, [4])],
                              [helper.make_tensor_value_info("y", TensorProto.INT64, [2, 4])])
    opsets = [helper.make_opsetid("", 20), helper.make_opsetid("com.onnxtrain", 1)]
    model = helper.make_model(graph, opset_imports=opsets)
    with pytest.raises(onnxtrain.ShapeError, match=r"attribute to \(7\) with X of float32: Y must be of X's dtype"):
        onnxtrain.Session.from_bytes(model.SerializeToString())
