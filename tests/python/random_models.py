"""Small transformer-shaped language models drawn at random from a seed, for differential tests against eager
(test_random_models.py). Each draw takes the shapes and the ways of writing a layer that onnxtrain's passes
recognise or must leave alone: LayerNorm with or without its affine parameters, RMSNorm as torch.nn and as the
transformers families write it (Llama's float32 upcast, T5's, Gemma's 1 + w); attention through
scaled_dot_product_attention or written out, causal or not, with a boolean or an additive padding mask or none,
grouped-query heads by expand-and-reshape or by enable_gqa, the rotary embedding, queries, keys and values from one
projection or three; GELU (exact or tanh), ReLU and SwiGLU MLPs; pre- or post-norm residuals; a tied or untied head,
with or without a bias; the cross-entropy's mean or sum, label smoothing, ignored targets, and the logits returned
beside the loss or not; every parameter trained, every other one, or the norms and biases alone; the written
attention's scale and mask and ReLU applied in place or not (the direct capture's functional forms of in-place
updates). Sizes are small and odd: 1-6 heads of 2-12 elements (6 features at least), 1-3 rows of 1-13 tokens,
5-70 classes."""

import dataclasses
import math
import random

import torch
import torch.nn.functional as F


class Draws:
    """The seed's draws, one generator for a case."""

    def __init__(self, seed):
        self.r = random.Random(seed)

    def below(self, n):
        return self.r.randrange(n)

    def one_in(self, n):
        return self.r.randrange(n) == 0

    def pick(self, options):
        return options[self.r.randrange(len(options))]


@dataclasses.dataclass
class Shape:
    vocab: int
    heads: int
    kv_heads: int
    head: int
    hidden: int
    layers: int
    norm: str  # layer, layer-plain (no affine), rms (torch.nn.RMSNorm), llama, t5, gemma
    attention: str  # sdpa, written (out in matmuls and softmax)
    causal: bool
    mask: str  # none, bool, additive (padding: the batch's own, from its lengths)
    gqa: str  # expand (transformers' repeat_kv), sdpa (enable_gqa)
    rope: bool
    fused_qkv: bool
    mlp: str  # gelu, gelu-tanh, relu, swiglu
    bias: bool
    post_norm: bool
    tied: bool
    head_bias: bool
    reduction: str  # mean, sum
    smoothing: float  # the cross-entropy's label smoothing
    with_logits: bool
    frozen: str  # none, alternate (every other parameter), bitfit (every weight but the norms' and the biases)
    inplace: bool  # the written attention's mask and scale, and ReLU, updating their operand in place

    @property
    def dim(self):
        return self.heads * self.head


def draw_shape(d: Draws) -> Shape:
    kv = d.pick([1, 1, 2, 3])
    heads = kv * d.pick([1, 1, 2])
    attention = d.pick(["sdpa", "sdpa", "written"])
    gqa = d.pick(["expand", "sdpa"]) if attention == "sdpa" else "expand"
    tied = d.one_in(3)
    head = 2 * (1 + d.below(6))
    while heads * head < 6:  # (a norm over 2 or 4 features is near constant: gradients through it are rounding)
        head += 2
    return Shape(vocab=5 + d.below(66), heads=heads, kv_heads=kv, head=head,
                 hidden=1 + d.below(40), layers=1 + d.below(2),
                 norm=d.pick(["layer", "layer-plain", "rms", "llama", "t5", "gemma"]), attention=attention,
                 causal=not d.one_in(4), mask=d.pick(["none", "bool", "additive"]), gqa=gqa, rope=d.one_in(2),
                 fused_qkv=d.one_in(2), mlp=d.pick(["gelu", "gelu-tanh", "relu", "swiglu"]), bias=not d.one_in(3),
                 post_norm=d.one_in(4), tied=tied, head_bias=not tied and d.one_in(3),
                 reduction=d.pick(["mean", "mean", "sum"]), smoothing=d.pick([0.0, 0.0, 0.0, 0.1]),
                 with_logits=d.one_in(3), frozen=d.pick(["none", "none", "none", "alternate", "bitfit"]),
                 inplace=d.one_in(3))


class Norm(torch.nn.Module):
    def __init__(self, style, dim, eps=1e-5):
        super().__init__()
        self.style, self.eps = style, eps
        if style in ("layer", "layer-plain"):
            self.norm = torch.nn.LayerNorm(dim, eps=eps, elementwise_affine=style == "layer")
        elif style == "rms":
            self.norm = torch.nn.RMSNorm(dim, eps=eps)
        else:
            self.weight = torch.nn.Parameter((0.0 if style == "gemma" else 1.0) + 0.2 * torch.randn(dim))

    def forward(self, x):
        if self.style in ("layer", "layer-plain", "rms"):
            return self.norm(x)
        if self.style == "llama":
            h = x.to(torch.float32)
            h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
            return self.weight * h.to(x.dtype)
        if self.style == "t5":
            return self.weight * (x * torch.rsqrt((x * x).mean(-1, keepdim=True) + self.eps))
        h = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps)
        return (h * (1.0 + self.weight.float())).type_as(x)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Attention(torch.nn.Module):
    def __init__(self, s: Shape):
        super().__init__()
        self.s = s
        kv = s.kv_heads * s.head
        if s.fused_qkv:
            self.qkv = torch.nn.Linear(s.dim, s.dim + 2 * kv, bias=s.bias)
        else:
            self.q = torch.nn.Linear(s.dim, s.dim, bias=s.bias)
            self.k = torch.nn.Linear(s.dim, kv, bias=s.bias)
            self.v = torch.nn.Linear(s.dim, kv, bias=s.bias)
        self.o = torch.nn.Linear(s.dim, s.dim, bias=s.bias)
        self.register_buffer("inv_freq", 1.0 / 10000 ** (torch.arange(0, s.head, 2).float() / s.head),
                             persistent=False)

    def split(self, x, heads):  # (B, T, heads * head) -> (B, heads, T, head)
        b, t, _ = x.shape
        return x.view(b, t, heads, self.s.head).transpose(1, 2)

    def forward(self, x, keep):  # keep: (B, T) bool, the tokens that are not padding
        s = self.s
        b, t, _ = x.shape
        kv = s.kv_heads * s.head
        if s.fused_qkv:
            q, k, v = self.qkv(x).split([s.dim, kv, kv], dim=-1)
        else:
            q, k, v = self.q(x), self.k(x), self.v(x)
        q, k, v = self.split(q, s.heads), self.split(k, s.kv_heads), self.split(v, s.kv_heads)
        if s.rope:
            angles = torch.arange(t, device=x.device).float()[:, None] * self.inv_freq[None, :]
            emb = torch.cat((angles, angles), dim=-1)
            cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
            q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        repeat = s.heads // s.kv_heads
        if repeat > 1 and s.gqa == "expand":
            k, v = (y[:, :, None].expand(b, s.kv_heads, repeat, t, s.head).reshape(b, s.heads, t, s.head)
                    for y in (k, v))
        allowed = keep[:, None, None, :]  # (B, 1, 1, T)
        if s.causal:
            allowed = allowed & torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        if s.attention == "sdpa":
            mask = None
            if s.mask == "bool":
                mask = allowed
            elif s.mask == "additive":
                mask = (~allowed).to(q.dtype) * -1e4
            causal = s.causal and s.mask == "none"
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal,
                                               enable_gqa=repeat > 1 and s.gqa == "sdpa")
        else:
            scores = q @ k.transpose(-1, -2)
            if s.inplace:
                scores.div_(math.sqrt(s.head))
                if s.mask == "additive":
                    scores.add_((~allowed).to(scores.dtype) * -1e4)
                elif s.mask == "bool" or s.causal:
                    scores.masked_fill_(~allowed, float("-inf"))
            else:
                scores = scores / math.sqrt(s.head)
                if s.mask == "additive":
                    scores = scores + (~allowed).to(scores.dtype) * -1e4
                elif s.mask == "bool" or s.causal:
                    scores = scores.masked_fill(~allowed, float("-inf"))
            y = torch.softmax(scores, dim=-1) @ v
        return self.o(y.transpose(1, 2).reshape(b, t, s.dim))


class MLP(torch.nn.Module):
    def __init__(self, s: Shape):
        super().__init__()
        self.kind, self.inplace = s.mlp, s.inplace
        self.up = torch.nn.Linear(s.dim, s.hidden, bias=s.bias)
        if s.mlp == "swiglu":
            self.gate = torch.nn.Linear(s.dim, s.hidden, bias=s.bias)
        self.down = torch.nn.Linear(s.hidden, s.dim, bias=s.bias)

    def forward(self, x):
        if self.kind == "swiglu":
            return self.down(F.silu(self.gate(x)) * self.up(x))
        h = self.up(x)
        if self.kind == "relu":
            h = F.relu(h, inplace=self.inplace)
        else:
            h = F.gelu(h, approximate="tanh" if self.kind == "gelu-tanh" else "none")
        return self.down(h)


class Layer(torch.nn.Module):
    def __init__(self, s: Shape):
        super().__init__()
        self.post = s.post_norm
        self.norm1, self.norm2 = Norm(s.norm, s.dim), Norm(s.norm, s.dim)
        self.attention, self.mlp = Attention(s), MLP(s)

    def forward(self, x, keep):
        if self.post:
            x = self.norm1(x + self.attention(x, keep))
            return self.norm2(x + self.mlp(x))
        x = x + self.attention(self.norm1(x), keep)
        return x + self.mlp(self.norm2(x))


class Model(torch.nn.Module):
    def __init__(self, s: Shape):
        super().__init__()
        self.s = s
        self.embed = torch.nn.Embedding(s.vocab, s.dim)
        self.layers = torch.nn.ModuleList(Layer(s) for _ in range(s.layers))
        self.norm = Norm(s.norm, s.dim)
        self.head = torch.nn.Linear(s.dim, s.vocab, bias=s.head_bias)
        if s.tied:
            self.head.weight = self.embed.weight
        for i, (name, p) in enumerate(self.named_parameters()):
            if (s.frozen == "alternate" and i % 2) or (s.frozen == "bitfit" and name.endswith("weight") and
                                                        "norm" not in name):
                p.requires_grad_(False)
        if not any(p.requires_grad for p in self.parameters()):
            self.embed.weight.requires_grad_(True)

    def forward(self, idx, targets, keep):
        x = self.embed(idx)
        for layer in self.layers:
            x = layer(x, keep)
        logits = self.head(self.norm(x))
        loss = F.cross_entropy(logits.reshape(-1, self.s.vocab).float(), targets.reshape(-1),
                               reduction=self.s.reduction, label_smoothing=self.s.smoothing)
        return (loss, logits) if self.s.with_logits else loss


def draw_batch(d: Draws, s: Shape, ignored=-100):
    """A batch of 1-3 rows of 1-13 tokens: ids, targets (some ignored, never all) and each row's kept tokens (a
    row's first always, the rest up to its length where the model masks padding)."""
    b, t = 1 + d.below(3), 1 + d.below(13)
    g = torch.Generator().manual_seed(d.below(1 << 30))
    idx = torch.randint(0, s.vocab, (b, t), generator=g)
    targets = torch.randint(0, s.vocab, (b, t), generator=g)
    targets[torch.rand(b, t, generator=g) < 0.2] = ignored
    targets[0, 0] = int(torch.randint(0, s.vocab, (), generator=g))
    keep = torch.ones(b, t, dtype=torch.bool)
    if s.mask != "none":
        for row in range(b):
            keep[row, 1 + d.below(t):] = False
    return idx, targets, keep


def describe(s: Shape, batch):
    idx = batch[0]
    return f"{s} on {tuple(idx.shape)}"
