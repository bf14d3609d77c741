"""Small PyTorch models the tests export and compare against: the example's GPT-like decoder, a CNN, a U-Net, an
MLP, a BERT-like encoder."""

import math

import torch
from gpt import GPT, Block, CausalSelfAttention  # noqa: F401  (examples/gpt.py, on the path by conftest)
from torch import nn
from torch.nn import functional as F


class CNN(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(16)
        self.conv2 = nn.Conv2d(16, 32, 3, stride=2, padding=1)
        self.bn2 = nn.BatchNorm2d(32)
        self.pool = nn.MaxPool2d(2)
        self.smooth = nn.AvgPool2d(3, stride=1, padding=1, count_include_pad=False)  # overlapping, padded windows
        self.avg = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(32, classes)

    def forward(self, x):  # x: (B, 3, H, W)
        x = self.pool(F.relu(self.bn1(self.conv1(x))))
        x = self.smooth(F.relu(self.bn2(self.conv2(x))))
        return self.fc(torch.flatten(self.avg(x), 1))


class UNet(nn.Module):
    """A two-level U-Net for per-pixel classes: average-pool down, nearest and bilinear (to the skip's size) up."""

    def __init__(self, classes=5):
        super().__init__()
        self.enc = nn.Conv2d(3, 8, 3, padding=1)
        self.mid = nn.Conv2d(8, 8, 3, padding=1)
        self.head = nn.Conv2d(24, classes, 1)

    def forward(self, x):  # x: (B, 3, H, W), H and W even -> (B, H, W, classes)
        skip = F.relu(self.enc(x))
        low = F.relu(self.mid(F.avg_pool2d(skip, 2)))
        near = F.interpolate(low, scale_factor=2, mode="nearest")
        smooth = F.interpolate(low, size=skip.shape[-2:], mode="bilinear", align_corners=False)
        return self.head(torch.cat([skip, near + skip, smooth], 1)).permute(0, 2, 3, 1)


class MLP(nn.Module):
    def __init__(self, dims=(16, 32, 32, 10)):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(dims[:-1], dims[1:]))

    def forward(self, x):
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i < len(self.layers) - 1:
                x = torch.tanh(x) if i % 2 else F.relu(x)
        return x


class EncoderLayer(nn.Module):
    """A BERT-style post-norm layer: bidirectional attention with a padding mask, then a GELU MLP."""

    def __init__(self, dim, heads, dropout=0.0):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln1 = nn.LayerNorm(dim)
        self.fc = nn.Linear(dim, 4 * dim)
        self.out = nn.Linear(4 * dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.drop = nn.Dropout(dropout)

    def forward(self, x, bias):  # x: (B, T, D); bias: (B, 1, 1, T), 0 or -1e4
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)
        q = q.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        k = k.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        v = v.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        att = F.softmax((q @ k.transpose(-2, -1)) / math.sqrt(d // self.heads) + bias, dim=-1)
        y = (self.drop(att) @ v).transpose(1, 2).reshape(b, t, d)
        x = self.ln1(x + self.drop(self.proj(y)))
        return self.ln2(x + self.drop(self.out(F.gelu(self.fc(x)))))


class BERT(nn.Module):
    """A small BERT-like encoder with a masked-token head."""

    def __init__(self, vocab=100, dim=32, heads=4, layers=2, block=64, dropout=0.0):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(block, dim)
        self.ln = nn.LayerNorm(dim)
        self.layers = nn.ModuleList(EncoderLayer(dim, heads, dropout) for _ in range(layers))
        self.head = nn.Linear(dim, vocab)

    def forward(self, idx, mask):  # idx: (B, T) int64; mask: (B, T) float, 1 for tokens, 0 for padding
        t = idx.shape[1]
        x = self.ln(self.tok(idx) + self.pos(torch.arange(t, device=idx.device)))
        bias = (1.0 - mask)[:, None, None, :] * -10000.0
        for layer in self.layers:
            x = layer(x, bias)
        return self.head(x)


class WithLoss(nn.Module):
    """A model followed by cross entropy over its last dim: forward(*inputs, target) -> loss."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, *args):
        *inputs, target = args
        out = self.model(*inputs)
        return F.cross_entropy(out.reshape(-1, out.shape[-1]), target.reshape(-1))
