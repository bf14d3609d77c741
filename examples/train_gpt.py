"""Trains a small character-level GPT, defined in plain PyTorch, on the license texts every Debian machine has
(/usr/share/common-licenses), with onnxtrain.Module (or --eager for plain PyTorch), then samples from it.
onnxtrain runs with its memory optimizer (level 1 unless told otherwise), prints the optimizer's report at the
first step, the memory statistics of each phase of one step (the second: the first exports) and, at the end, the
step's peak as predicted and as measured."""

import argparse
import glob
import json
import logging
import math
import os
import sys
import time

import torch
from torch.nn import functional as F
from tqdm import tqdm

import onnxtrain
from gpt import GPT


def load_text(folder="/usr/share/common-licenses"):
    files = sorted(f for f in glob.glob(os.path.join(folder, "*")) if os.path.isfile(f) and not os.path.islink(f))
    if not files:
        raise SystemExit(f"no text files in {folder}")
    return "\n".join(open(f, encoding="utf-8", errors="replace").read() for f in files)


class CharLM(torch.nn.Module):
    """The GPT with its loss: forward(idx, target) -> the loss; forward(idx) -> the logits. (Training returns the
    loss alone: logits nobody reads are never held, and onnxtrain fuses the head with the loss so that no
    (tokens, vocabulary) value exists whole.)"""

    def __init__(self, gpt):
        super().__init__()
        self.gpt = gpt

    def forward(self, idx, target=None):
        logits = self.gpt(idx)
        if target is None:
            return logits
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--block", type=int, default=64, help="context length")
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--eager", action="store_true", help="plain PyTorch, for comparison")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--plot", help="record the first training step's memory timeline into this PNG (onnxtrain only)")
    p.add_argument("--memory-level", type=int, default=1, choices=(0, 1, 2),
                   help="memory optimizer level: 0 none, 1 transformer layer-wise recompute, 2 plus compromised plans")
    p.add_argument("--budget", default="", help="memory budget: a fraction of the stash (0.5) or a step peak (64MiB)")
    p.add_argument("--no-memory-stats", action="store_true", help="do not print the per-phase memory statistics")
    p.add_argument("--bf16", action="store_true",
                   help="mixed precision: each step under torch.autocast(device, dtype=torch.bfloat16)")
    p.add_argument("--device", default=default_device(),
                   help="cpu or cuda[:N] (default: cuda where there is a GPU and onnxtrain was built for it)")
    args = p.parse_args()
    device = torch.device(args.device)
    torch.manual_seed(args.seed)
    text = load_text()
    chars = sorted(set(text))
    stoi = {c: i for i, c in enumerate(chars)}
    data = torch.tensor([stoi[c] for c in text], dtype=torch.int64)
    model = CharLM(GPT(vocab=len(chars), dim=args.dim, heads=args.heads, layers=args.layers, block=args.block))
    model.to(device)
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else f"{torch.get_num_threads()} threads"
    print(f"{len(text)} characters, vocabulary {len(chars)}, {sum(q.numel() for q in model.parameters())} parameters, "
          f"{'PyTorch eager' if args.eager else 'onnxtrain'}{', bf16 autocast' if args.bf16 else ''}, {where}")
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.bf16)
    if not args.eager:
        model = onnxtrain.Module(model, onnxtrain.Options(
            memory_opt_level=args.memory_level, memory_budget=args.budget, memory_timeline=args.plot or ""))
    if not args.no_memory_stats:  # (for plain PyTorch the same lines, with the process's RSS)
        stats_log = logging.getLogger("train_gpt.memory")
        stats_log.setLevel(logging.INFO)
        onnxtrain.subscribe_memory_stats(model, logger=stats_log, steps=[1])
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)

    def batch():
        start = torch.randint(0, len(data) - args.block - 1, (args.batch,))
        idx = torch.stack([data[s:s + args.block] for s in start])
        return idx.to(device), torch.stack([data[s + 1:s + args.block + 1] for s in start]).to(device)

    model.train()
    first = None
    t0 = time.perf_counter()
    tqdm.monitor_interval = 0  # no monitor thread: onnxtrain captures in a forked process only while no other runs
    bar = tqdm(range(args.steps), desc="training", unit="step", mininterval=1.0, disable=not sys.stderr.isatty())
    for step in bar:
        lr = args.lr * min(1.0, (step + 1) / 20) * (0.5 * (1 + math.cos(math.pi * step / args.steps)) * 0.9 + 0.1)
        for group in opt.param_groups:
            group["lr"] = lr
        idx, target = batch()
        opt.zero_grad(set_to_none=True)
        if step == args.steps - 1:  # the last step's own peak, the previous step's outputs released first
            loss = None
            onnxtrain.reset_peak_stats(str(device))
            base = onnxtrain.memory_stats(device)["allocated"]
        with autocast:
            loss = model(idx, target)
        loss.backward()
        opt.step()
        first = first if first is not None else loss.item()
        bar.set_postfix(loss=f"{loss.item():.3f}")
        if step % max(1, args.steps // 10) == 0 or step == args.steps - 1:
            tqdm.write(f"step {step:5d}  loss {loss.item():.4f}")
    elapsed = time.perf_counter() - t0
    print(f"loss {first:.3f} -> {loss.item():.3f} in {args.steps} steps, {elapsed / args.steps * 1e3:.1f} ms/step")
    if not args.eager and not args.no_memory_stats:
        predicted = json.loads(model.memory_report(json=True))["predicted_after"]
        stats = onnxtrain.memory_stats(device)
        mib = 2**-20
        measured = stats["peak_allocated"] - base
        print(f"memory: the last step's peak {measured * mib:.2f} MiB measured by the allocator, "
              f"{predicted['peak'] * mib:.2f} MiB predicted before the first step (with parameters and optimizer "
              f"state {predicted['total'] * mib:.2f} MiB); cached {stats['cached'] * mib:.1f} MiB; process RSS "
              f"{stats['process_rss'] * mib:.0f} MiB")

    model.eval()
    context = torch.tensor([[stoi[c] for c in "Permission is "]], dtype=torch.int64, device=device)
    with torch.no_grad():
        for _ in range(120):
            ctx = context[:, -args.block:]
            logits = model(ctx)
            probs = F.softmax(logits[0, -1] / 0.8, dim=-1)
            context = torch.cat([context, torch.multinomial(probs, 1)[None]], dim=1)
    print("sample:", "".join(chars[i] for i in context[0].tolist()))


def default_device():
    """cuda where PyTorch sees a GPU and this onnxtrain build runs there, else cpu."""
    return "cuda" if torch.cuda.is_available() and onnxtrain.device_available("cuda") else "cpu"


class TqdmLogHandler(logging.Handler):
    """Log lines above the progress bar instead of through it."""

    def emit(self, record):
        tqdm.write(self.format(record))


if __name__ == "__main__":
    logging.basicConfig(format="%(message)s", handlers=[TqdmLogHandler()])
    main()
