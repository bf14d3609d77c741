"""What ordinary models use, exported and trained through onnxtrain.Module: outputs and gradients of every
parameter and input match eager for each (the ops PyTorch 1.13's exporter failed on included)."""

import copy

import pytest
import torch
from torch import nn
from torch.nn import functional as F

import onnxtrain


class Fn(nn.Module):
    """A linear layer followed by `fn(h, y)`; an nn.RMSNorm (with its weight) for those that use it."""

    def __init__(self, fn, out=6):
        super().__init__()
        self.lin = nn.Linear(4, out)
        self.norm = nn.RMSNorm(out)
        self.fn = fn

    def forward(self, x, y):
        h = self.lin(x)
        return self.fn(h, y) if self.fn is not None else (self.norm(h) * y).sum()


def rotary(q):
    t, d = q.shape[-2], q.shape[-1]
    inv = 1.0 / (10000 ** (torch.arange(0, d, 2).float() / d))
    ang = torch.arange(t).float()[:, None] * inv[None, :]
    cos, sin = ang.cos().repeat(1, 2), ang.sin().repeat(1, 2)
    rot = torch.cat([-q[..., d // 2:], q[..., : d // 2]], dim=-1)
    return q * cos + rot * sin


def sdpa(causal, masked):
    def fn(h, y):
        q = h.view(h.shape[0], 2, 3, 1)  # (B, heads, T, D)
        mask = (torch.arange(3)[None, :] <= torch.arange(3)[:, None]) if masked else None
        return F.scaled_dot_product_attention(q, q * 0.5, q + 1, attn_mask=mask, is_causal=causal).sum() + (y * 0).sum()
    return fn


CASES = {
    "mse_loss": (lambda h, y: F.mse_loss(h, y), "float"),
    "l1_loss": (lambda h, y: F.l1_loss(h, y), "float"),
    "smooth_l1_loss": (lambda h, y: F.smooth_l1_loss(h, y, beta=0.5), "float"),
    "huber_loss": (lambda h, y: F.huber_loss(h, y, delta=0.7), "float"),
    "binary_cross_entropy": (lambda h, y: F.binary_cross_entropy(torch.sigmoid(h), y.sigmoid()), "float"),
    "cross_entropy_label_smoothing": (lambda h, y: F.cross_entropy(h, y, label_smoothing=0.1), "class"),
    "cross_entropy_ignore_index": (lambda h, y: F.cross_entropy(h, y, ignore_index=2), "class"),
    # (the targets' shape through torch.roll's Mod of the shift by a dim: the two slices add up to the dim again)
    "cross_entropy_rolled_target": (lambda h, y: F.cross_entropy(h, torch.roll(y, -1, 0)), "class"),
    "layer_norm_no_weight": (lambda h, y: (F.layer_norm(h, (6,)) * y).sum(), "float"),
    "baddbmm": (lambda h, y: torch.baddbmm(h.view(-1, 2, 3)[:, :, :2], h.view(-1, 2, 3), y.view(-1, 3, 2) * 0.5).sum(),
                "float"),
    "sdpa_causal": (sdpa(True, False), "float"),
    "sdpa_mask": (sdpa(False, True), "float"),
    "rms_norm": (lambda h, y: (nn.functional.rms_norm(h, (6,), eps=1e-6) * y).sum(), "float"),
    "RMSNorm_module": (None, "float"),
    "silu": (lambda h, y: F.silu(h).sum() + (y * 0).sum(), "float"),
    "gelu_tanh": (lambda h, y: F.gelu(h, approximate="tanh").sum() + (y * 0).sum(), "float"),
    "rotary": (lambda h, y: rotary(h.view(h.shape[0], 3, 2)).pow(2).sum() + (y * 0).sum(), "float"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_op_exports_and_trains(name):
    fn, target = CASES[name]
    torch.manual_seed(0)
    eager = Fn(fn)
    wrapped = onnxtrain.Module(copy.deepcopy(eager))
    x = torch.randn(5, 4)
    y = torch.randn(5, 6) if target == "float" else torch.tensor([0, 2, 5, 1, 2])
    want, got = eager(x, y), wrapped(x, y)
    assert torch.allclose(got, want, rtol=1e-5, atol=1e-6)
    want.backward()
    got.backward()
    for (n, p), q in zip(wrapped.named_parameters(), eager.parameters()):
        if q.grad is not None:
            assert torch.allclose(p.grad, q.grad, rtol=1e-4, atol=1e-6), n
