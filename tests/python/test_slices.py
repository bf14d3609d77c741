"""Slices that cost nothing to leave out: a fused query-key-value projection cut into parts along its last dim
(Phi-3's, GPT-NeoX's per head) has its parts' gradients concatenated, not each written into zeros and summed; a
Slice taking all of its input and a Concat with an empty part (Phi-3's rotary embedding of the whole head, with its
empty pass-through part) go. The loss and every gradient as eager's."""

import copy

import onnx
import pytest
import torch

import onnxtrain


class FusedQKV(torch.nn.Module):
    def __init__(self, d=16, heads=2, kv=8, rotary=8):
        super().__init__()
        self.heads, self.kv, self.rotary = heads, kv, rotary
        self.qkv = torch.nn.Linear(d, d + 2 * kv)
        self.o = torch.nn.Linear(d, d)

    def forward(self, x):
        b, t, d = x.shape
        qkv = self.qkv(x)
        q, k, v = qkv[..., :d], qkv[..., d:d + self.kv], qkv[..., d + self.kv:]
        q = q.view(b, t, self.heads, -1).transpose(1, 2)
        q_rot, q_pass = q[..., :self.rotary], q[..., self.rotary:]  # (the whole head: q_pass is empty)
        q = torch.cat((q_rot.sin() * 2, q_pass), dim=-1)
        kv = (k * v).view(b, t, 1, -1).transpose(1, 2)
        y = (q * kv.mean(-1, keepdim=True)).transpose(1, 2).reshape(b, t, d)
        return self.o(y).square().mean()


def assert_gradients_as_eagers(eager, x, **options):
    """One backward of the module and of onnxtrain.Module of a copy: every parameter's gradient alike."""
    ours = onnxtrain.Module(copy.deepcopy(eager), onnxtrain.Options(**options))
    ours(x).backward(), eager(x).backward()
    for name, p in eager.named_parameters():
        torch.testing.assert_close(ours.module.get_parameter(name).grad, p.grad, rtol=1e-5, atol=1e-6, msg=name)


def test_cut_projection_and_whole_head_rotary_train_as_eager_without_slice_gradients(tmp_path):
    torch.manual_seed(0)
    assert_gradients_as_eagers(FusedQKV(), torch.randn(2, 5, 16), save_onnx=str(tmp_path))
    graph = onnx.load(str(tmp_path / "FusedQKV_train_optimized.onnx")).graph
    ops = [n.op_type for n in graph.node]
    assert "SliceGrad" not in ops and "Split" not in ops, ops
    # forward: the three parts' Slices; backward: one Concat of their gradients (the others concatenate shapes)
    floats = {v.name for v in graph.value_info if v.type.tensor_type.elem_type == onnx.TensorProto.FLOAT}
    assert ops.count("Slice") == 3, ops
    assert len([n for n in graph.node if n.op_type == "Concat" and n.output[0] in floats]) == 1, ops


@pytest.mark.parametrize("parts", [[(0, 4), (6, 12)], [(0, 8), (4, 12)]])
def test_parts_that_leave_a_gap_or_overlap_keep_their_slice_gradients(parts):
    """Only a partition of the axis is a Concat: a gap's gradient is zero, an overlap's a sum."""
    class Cut(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(3, 12))

        def forward(self, x):
            return sum((self.w[:, a:b] * x[:, a:b]).sin().sum() for a, b in parts)

    torch.manual_seed(0)
    assert_gradients_as_eagers(Cut(), torch.randn(3, 12))
