"""GELU's two exported forms become one Gelu node: the erf form (F.gelu) and the tanh form GPT-2 writes out
(transformers' NewGELUActivation, gelu_new): no Erf or Tanh left in the training graph, its gradient one GeluGrad
of the same form, and the loss and every gradient as eager's (float32, and bf16 autocast). Also the tanh form as
CUDA's autocast runs it (tanh-cuda): Pow in float32, what meets its result promoted to float32, x * 0.5 in bf16; its
Gelu then computes in bf16 (a float32 one between two Casts is narrowed), with no float32 copy of the activation;
also where views stand between the products and the GELU, as GPT-2's Conv1D flattens its input for addmm
(tanh-cuda-views: the Cast back to bf16 after a Reshape)."""

import math

import onnx
import pytest
import torch

import onnxtrain


class MLP(torch.nn.Module):
    def __init__(self, form):
        super().__init__()
        self.form = form
        self.fc = torch.nn.Linear(16, 48)
        self.proj = torch.nn.Linear(48, 16)

    def act(self, h):
        if self.form == "tanh":  # NewGELUActivation
            return 0.5 * h * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (h + 0.044715 * torch.pow(h, 3.0))))
        if self.form.startswith("tanh-cuda"):  # NewGELUActivation's dtypes under CUDA's autocast (pow: float32)
            return 0.5 * h * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (h + 0.044715 * torch.pow(h.float(), 3.0))))
        return torch.nn.functional.gelu(h)

    def forward(self, x):
        if self.form == "tanh-cuda-views":  # transformers' Conv1D: addmm over the rows, viewed back
            h = torch.addmm(self.fc.bias, x.view(-1, 16), self.fc.weight.t()).view(*x.shape[:-1], 48)
            h = self.act(h)
            return torch.addmm(self.proj.bias, h.view(-1, 48), self.proj.weight.t()).sin().sum()
        return self.proj(self.act(self.fc(x))).sin().sum()


@pytest.mark.parametrize("form, bf16", [("tanh", False), ("tanh", True), ("erf", False), ("erf", True),
                                        ("tanh-cuda", True), ("tanh-cuda-views", True)])
def test_gelu_forms_are_fused_and_train_as_eager(form, bf16, tmp_path):
    torch.manual_seed(0)
    eager = MLP(form)
    ours = onnxtrain.Module(MLP(form), onnxtrain.Options(save_onnx=str(tmp_path)))
    ours.load_state_dict(eager.state_dict())
    x = torch.randn(3, 7, 16) * 2
    with torch.autocast("cpu", torch.bfloat16, enabled=bf16):
        got, want = ours(x), eager(x)
    got.backward()
    want.backward()
    graph = onnx.load(str(tmp_path / "MLP_train_optimized.onnx")).graph
    # (the GELU's output is recomputed in backward at every level: with its gradient, one GeluAndGrad for both)
    ops = [n.op_type for n in graph.node if "_recompute" not in n.name]
    grads = [n for n in graph.node if n.op_type in ("GeluGrad", "GeluAndGrad")]
    assert ops.count("Gelu") == 1 and len(grads) == 1 and not {"Erf", "Tanh", "Pow"} & set(ops), ops
    gelu = grads[0]
    assert [a.s.decode() for a in gelu.attribute if a.name == "approximate"] == (["tanh"] if form != "erf" else [])
    if bf16:  # (the activation and its gradient in bf16: no float32 copy of either)
        types = {v.name: v.type.tensor_type.elem_type for v in graph.value_info}
        fused = [n for n in graph.node if n.op_type in ("Gelu", "GeluGrad", "GeluAndGrad")]
        assert all(types[v] == onnx.TensorProto.BFLOAT16 for n in fused for v in [*n.input, *n.output]), fused
    tol = dict(rtol=2e-2, atol=2e-2) if bf16 else dict(rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got.float(), want.float(), **tol)  # (under autocast ours sums in float32)
    for (name, p), q in zip(ours.named_parameters(), eager.parameters()):
        if bf16:
            cos = torch.nn.functional.cosine_similarity(p.grad.flatten().double(), q.grad.flatten().double(), dim=0)
            assert cos >= 0.999, name
        else:
            torch.testing.assert_close(p.grad, q.grad, rtol=0, atol=1e-4 * q.grad.abs().max().item(), msg=name)
