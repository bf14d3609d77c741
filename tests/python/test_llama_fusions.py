"""The Llama family's fusions: RMSNorm as transformers' families write it (Llama's float32 upcast, T5's, Gemma's
1 + w) becomes one com.onnxtrain.RMSNormalization (no Pow, ReduceMean or Sqrt left in the training graph), and the
SwiGLU MLP's silu(gate) * up one com.onnxtrain.SwiGLU (no Sigmoid), and the rotary embedding of queries and keys one
com.onnxtrain.RotaryEmbedding each (no Neg, and under autocast no Cast in or out); the loss and every gradient as
eager's, in float32 and under bf16 autocast (whose norm statistics stay float32)."""

import onnx
import pytest
import torch

import onnxtrain


class Norms(torch.nn.Module):
    def __init__(self, style, d=24, eps=1e-6):
        super().__init__()
        self.style, self.eps = style, eps
        self.fc = torch.nn.Linear(d, d)
        self.weight = torch.nn.Parameter(1 + 0.1 * torch.randn(d))

    def norm(self, x):
        if self.style == "llama":  # LlamaRMSNorm
            dtype = x.dtype
            h = x.to(torch.float32)
            h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
            return self.weight * h.to(dtype)
        if self.style == "t5":  # T5LayerNorm: the scale on the left, the square as a product
            h = x * torch.rsqrt((x * x).mean(-1, keepdim=True) + self.eps)
            return self.weight * h
        h = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps)  # GemmaRMSNorm
        return (h * (1.0 + self.weight.float())).type_as(x)

    def forward(self, x):  # two norms of one scale (as a final norm shares none; each fused on its own)
        h = self.fc(self.norm(x)).float()  # (a residual stream stays float32 under autocast)
        return h.sin().sum() * 0.1 + self.norm(h).sum() * 0.01


class SwiGLUMLP(torch.nn.Module):  # LlamaMLP
    def __init__(self, d=24, hidden=40):
        super().__init__()
        self.gate_proj = torch.nn.Linear(d, hidden, bias=False)
        self.up_proj = torch.nn.Linear(d, hidden, bias=False)
        self.down_proj = torch.nn.Linear(hidden, d, bias=False)

    def forward(self, x):
        return (self.down_proj(torch.nn.functional.silu(self.gate_proj(x)) * self.up_proj(x)) ** 2).mean()


class Rotary(torch.nn.Module):  # LlamaAttention's queries and keys with transformers' apply_rotary_pos_emb
    def __init__(self, d=24, heads=3, float32_cos=False):
        super().__init__()
        self.heads, self.float32_cos = heads, float32_cos
        self.q, self.k = torch.nn.Linear(d, d), torch.nn.Linear(d, d)
        self.register_buffer("inv_freq", 1.0 / 10000 ** (torch.arange(0, d // heads, 2).float() / (d // heads)),
                             persistent=False)

    def forward(self, x):
        from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

        b, t, d = x.shape
        freqs = torch.arange(t, dtype=torch.float32)[:, None] * self.inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)[None].expand(b, -1, -1)
        cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
        q = self.q(x).view(b, t, self.heads, -1).transpose(1, 2)
        k = self.k(x).view(b, t, self.heads, -1).transpose(1, 2)
        if not self.float32_cos:  # (else as LlamaModel passes them under autocast: bf16 q and k, float32 cos and sin)
            cos, sin = cos.to(q.dtype), sin.to(q.dtype)
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        att = torch.nn.functional.scaled_dot_product_attention(q, k, k, is_causal=True)
        return att.float().sum() * 0.1 + q.float().square().mean()


def trained_ops(make, bf16, tmp_path):
    """The optimized training graph's ops, after checking the step against eager's."""
    torch.manual_seed(0)
    eager = make()
    ours = onnxtrain.Module(make(), onnxtrain.Options(save_onnx=str(tmp_path)))
    ours.load_state_dict(eager.state_dict())
    x = torch.randn(2, 5, 24)
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    with torch.autocast("cpu", torch.bfloat16, enabled=bf16):
        got, want = ours(xa), eager(xb)
    got.backward()
    want.backward()
    tol = dict(rtol=2e-2, atol=2e-3) if bf16 else dict(rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(got, want, **tol)
    grads = [("x", xa.grad, xb.grad)] + [(n, p.grad, q.grad) for (n, p), q in
                                         zip(ours.named_parameters(), eager.parameters())]
    for name, a, b in grads:
        if bf16:
            cos = torch.nn.functional.cosine_similarity(a.flatten().double(), b.flatten().double(), dim=0)
            assert cos >= 0.999, name
        else:
            torch.testing.assert_close(a, b, rtol=0, atol=1e-4 * b.abs().max().item(), msg=name)
    name = type(ours.module).__name__
    graph = onnx.load(str(tmp_path / f"{name}_train_optimized.onnx")).graph
    return [n.op_type for n in graph.node if "_recompute" not in n.name]  # (not the memory optimizer's clones)


@pytest.mark.parametrize("style", ["llama", "t5", "gemma"])
@pytest.mark.parametrize("bf16", [False, True])
def test_rms_norm_is_fused_and_trains_as_eager(style, bf16, tmp_path):
    ops = trained_ops(lambda: Norms(style), bf16, tmp_path)
    assert ops.count("RMSNormalization") == 2 and ops.count("RMSNormalizationGrad") == 2, ops
    assert not {"Pow", "ReduceMean", "Sqrt", "Reciprocal"} & set(ops), ops


@pytest.mark.parametrize("bf16", [False, True])
def test_swiglu_is_fused_and_trains_as_eager(bf16, tmp_path):
    ops = trained_ops(SwiGLUMLP, bf16, tmp_path)
    assert ops.count("SwiGLU") == 1 and ops.count("SwiGLUGrad") == 1 and "Sigmoid" not in ops, ops


@pytest.mark.parametrize("float32_cos", [False, True])
@pytest.mark.parametrize("bf16", [False, True])
def test_rotary_embedding_is_fused_and_trains_as_eager(bf16, float32_cos, tmp_path):
    ops = trained_ops(lambda: Rotary(float32_cos=float32_cos), bf16, tmp_path)
    assert ops.count("RotaryEmbedding") == 4 and "Neg" not in ops, ops  # (queries and keys, forward and backward)
    if bf16 and float32_cos:  # (Llama's autocast: bf16 queries and keys, float32 cos and sin)
        graph = onnx.load(str(tmp_path / "Rotary_train_optimized.onnx")).graph
        made = {o: n for n in graph.node for o in n.output}
        rotary = [n for n in graph.node if n.op_type == "RotaryEmbedding"]
        # the queries and keys are read without their up-cast, and the keys (read only by attention, in bf16) are
        # written in bf16, as is every gradient of them
        assert not [r.name for r in rotary if r.input[0] in made and made[r.input[0]].op_type == "Cast"]
        bf16_out = [r.name for r in rotary if any(a.name == "to" and a.i == onnx.TensorProto.BFLOAT16
                                                  for a in r.attribute)]
        assert len([n for n in bf16_out if "_grad" not in n]) >= 1 and len(bf16_out) >= 3, bf16_out


class RotaryAttention(torch.nn.Module):
    """LlamaAttention: 4 query heads on 2 key-value heads (repeat_kv), queries and keys rotated (cos and sin in
    float32, as LlamaModel passes them under autocast), causal attention, the heads merged for o_proj."""

    def __init__(self, d=24, heads=4, kv_heads=2):
        super().__init__()
        self.heads, self.kv_heads, self.head = heads, kv_heads, d // heads
        self.q, self.o = torch.nn.Linear(d, d), torch.nn.Linear(d, d)
        self.k, self.v = torch.nn.Linear(d, self.head * kv_heads), torch.nn.Linear(d, self.head * kv_heads)
        self.register_buffer("inv_freq", 1.0 / 10000 ** (torch.arange(0, self.head, 2).float() / self.head),
                             persistent=False)

    def forward(self, x):
        from transformers.models.llama.modeling_llama import apply_rotary_pos_emb, repeat_kv

        b, t, d = x.shape
        freqs = torch.arange(t, dtype=torch.float32)[:, None] * self.inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)[None].expand(b, -1, -1)
        q = self.q(x).view(b, t, self.heads, self.head).transpose(1, 2)
        k, v = (p(x).view(b, t, self.kv_heads, self.head).transpose(1, 2) for p in (self.k, self.v))
        q, k = apply_rotary_pos_emb(q, k, emb.cos(), emb.sin())
        k, v = (repeat_kv(h, self.heads // self.kv_heads) for h in (k, v))
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o(y.transpose(1, 2).reshape(b, t, d)).sin().sum()


@pytest.mark.parametrize("bf16", [False, True])
def test_rotated_heads_are_attended_where_the_projections_write_them(bf16, tmp_path):
    """rotary_past_transpose and attention_layout: the queries and keys are rotated as (B, T, H, d) (cos and sin
    transposed instead, once for every layer) and attended there with the values, the output written as o_proj reads
    it: the only Transposes left are cos's and sin's, in forward and backward alike."""
    ops = trained_ops(RotaryAttention, bf16, tmp_path)
    graph = onnx.load(str(tmp_path / "RotaryAttention_train_optimized.onnx")).graph
    fused = [n for n in graph.node if n.op_type in ("FlashAttention", "FlashAttentionGrad")]
    assert all([list(a.ints) for a in n.attribute if a.name == "sequence_major"] == [[1, 1, 1, 1]] for n in fused)
    assert len(fused) == 2 and ops.count("RotaryEmbedding") == 4 and ops.count("Transpose") == 2, ops
