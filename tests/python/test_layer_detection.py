"""Transformer layers found from structure, exactly, across families and coding styles: transformers' GPT-2, BERT
(post-norm), Llama (RMSNorm, SwiGLU, grouped-query heads), ViT, GPT-NeoX (parallel residual) and a nanoGPT-style
model (mask built inside each block, dropout on the attention probabilities and the residual branches), each at
two or three depths; a model without attention reports none and recomputes nothing at level 1."""

import math
import warnings

import pytest
import torch
from torch import nn
from torch.nn import functional as F

import onnxtrain

transformers = pytest.importorskip("transformers")


class NanoAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.c_attn = nn.Linear(dim, 3 * dim)
        self.c_proj = nn.Linear(dim, dim)
        self.attn_dropout = nn.Dropout(0.1)
        self.resid_dropout = nn.Dropout(0.1)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        bias = torch.tril(torch.ones(t, t, device=x.device)).view(1, 1, t, t)  # built here, as nanoGPT's fallback
        att = att.masked_fill(bias == 0, float("-inf"))
        att = self.attn_dropout(F.softmax(att, dim=-1))
        return self.resid_dropout(self.c_proj((att @ v).transpose(1, 2).contiguous().view(b, t, c)))


class NanoBlock(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = NanoAttention(dim, heads)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim), nn.Dropout(0.1))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class NanoGPT(nn.Module):
    def __init__(self, layers, vocab=100, dim=32, heads=4, block=16):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, dim), nn.Embedding(block, dim)
        self.drop = nn.Dropout(0.1)
        self.h = nn.ModuleList(NanoBlock(dim, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(dim)
        self.lm_head = nn.Linear(dim, vocab, bias=False)

    def forward(self, idx, targets):
        x = self.drop(self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device)))
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def text_inputs(mask=False):
    ids = torch.randint(0, 100, (2, 8))
    kw = dict(input_ids=ids, labels=ids)
    if mask:
        kw["attention_mask"] = torch.ones_like(ids)
    return kw


FAMILIES = {
    "gpt2": (lambda n: transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=100, n_positions=16, n_embd=32, n_layer=n, n_head=4, use_cache=False)), text_inputs),
    "bert": (lambda n: transformers.BertForMaskedLM(transformers.BertConfig(
        vocab_size=100, hidden_size=32, num_hidden_layers=n, num_attention_heads=4, intermediate_size=64,
        max_position_embeddings=16)), lambda: text_inputs(mask=True)),
    "llama": (lambda n: transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=n, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=16, use_cache=False)), text_inputs),
    "vit": (lambda n: transformers.ViTForImageClassification(transformers.ViTConfig(
        image_size=16, patch_size=8, hidden_size=32, num_hidden_layers=n, num_attention_heads=4,
        intermediate_size=64, num_labels=3)),
        lambda: dict(pixel_values=torch.randn(2, 3, 16, 16), labels=torch.tensor([0, 2]))),
    "gpt_neox": (lambda n: transformers.GPTNeoXForCausalLM(transformers.GPTNeoXConfig(
        vocab_size=100, hidden_size=32, num_hidden_layers=n, num_attention_heads=4, intermediate_size=64,
        max_position_embeddings=16, use_cache=False)), text_inputs),
}


def detected(module, kwargs):
    wrapped = onnxtrain.Module(module.train(), onnxtrain.Options(memory_opt_level=1))
    out = wrapped(**kwargs)
    loss = out if isinstance(out, torch.Tensor) else out.loss
    loss.backward()
    report = wrapped.memory_report()
    line = next(x for x in report.splitlines() if x.startswith("level 1:"))
    return int(line.split()[2]), line


@pytest.mark.parametrize("depth", [1, 3])
@pytest.mark.parametrize("family", list(FAMILIES))
def test_every_layer_of_transformers_families(family, depth):
    warnings.simplefilter("ignore")
    torch.manual_seed(0)
    make, inputs = FAMILIES[family]
    count, line = detected(make(depth), inputs())
    assert count == depth, line


@pytest.mark.parametrize("depth", [1, 2, 6])
def test_every_layer_of_a_nanogpt_style_model(depth):
    torch.manual_seed(0)
    idx = torch.randint(0, 100, (2, 16))
    count, line = detected(NanoGPT(depth), dict(idx=idx, targets=idx))
    assert count == depth, line


def test_a_model_without_attention_has_no_layers_and_says_so():
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 8))

    class WithLoss(nn.Module):
        def __init__(self):
            super().__init__()
            self.mlp = mlp

        def forward(self, x):
            return (self.mlp(x) + x).pow(2).mean()

    count, line = detected(WithLoss(), dict(x=torch.randn(4, 8)))
    assert count == 0 and "nothing recomputed" in line, line
