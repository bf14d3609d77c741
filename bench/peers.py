"""Whole-process memory and step time against the peers, as users measure them: a GPT (dim 384, 6 layers, 6 heads,
8x128, vocab 8192, dropout 0.1, AdamW) trained by PyTorch eager, eager with torch.utils.checkpoint per block,
torch.compile (inductor) by default and with activation_memory_budget 0.5, and onnxtrain at memory levels 0, 1, 2
and under budgets, and through torch.compile with the onnxtrain backend at levels 0 and 1. Each configuration runs
in its own process, configurations alternate, figures are medians. The first step's time (capture, export or
compilation, session, and the step itself) is printed beside.

Peak RSS growth: the process's peak resident memory over the measured steps (the peak is reset after two warm-up
steps, so export and compilation do not count) minus its resident memory after building the model and the
optimizer (so whatever a configuration keeps between steps counts).

    python bench/peers.py [--rounds 3] [--steps 6] [--only eager,onnxtrain-l1,onnxtrain-l1-keep]

(a "-keep" suffix on an onnxtrain configuration keeps the allocator's free blocks between steps: Options.keep_cache;
an "-idle" suffix returns them once idle for a second rather than at the end of each backward:
Options.release_cache_after;
a "-torchscript" suffix captures with the TorchScript-based exporter instead of torch.export: Options.exporter)
"""

import argparse
import gc
import os
import statistics
import subprocess
import sys
import time

from process_memory import reset_peak_rss, rss_mib

HERE = os.path.dirname(os.path.abspath(__file__))
CONFIGS = ["eager", "eager-checkpoint", "compile", "compile-budget-0.5", "onnxtrain-l0", "onnxtrain-l1",
           "onnxtrain-l2", "onnxtrain-budget-0.5", "onnxtrain-budget-0.3", "compile-onnxtrain-l0",
           "compile-onnxtrain-l1"]


def build(config):
    sys.path.insert(0, os.path.join(HERE, "..", "examples"))
    import torch
    from torch.utils.checkpoint import checkpoint

    import onnxtrain
    from gpt import GPT
    from train_gpt import CharLM

    class CheckpointedGPT(GPT):
        def forward(self, idx):
            t = idx.shape[1]
            x = self.drop(self.tok(idx) + self.pos(torch.arange(t, device=idx.device)))
            for blk in self.blocks:
                x = checkpoint(blk, x, use_reentrant=False)
            return self.head(self.ln(x))

    torch.manual_seed(0)
    cls = CheckpointedGPT if config == "eager-checkpoint" else GPT
    model = CharLM(cls(vocab=8192, dim=384, heads=6, layers=6, block=128, dropout=0.1)).train()
    if config.startswith("compile-onnxtrain"):  # the torch.compile front door to onnxtrain
        model = torch.compile(model, backend="onnxtrain", options={"memory_opt_level": int(config[-1])})
    elif config.startswith("compile"):
        if config == "compile-budget-0.5":
            import torch._functorch.config as functorch_config

            functorch_config.activation_memory_budget = 0.5
        model = torch.compile(model)
    elif config.startswith("onnxtrain"):
        keep = config.endswith("-keep")  # the allocator's free blocks kept between steps (Options.keep_cache)
        what = config.removesuffix("-keep")
        after = 1.0 if what.endswith("-idle") else 0.0  # kept until idle for a second (release_cache_after)
        what = what.removesuffix("-idle")
        exporter = "torchscript" if what.endswith("-torchscript") else "auto"
        what = what.removesuffix("-torchscript")
        common = dict(keep_cache=keep, release_cache_after=after, exporter=exporter)
        if "budget" in what:
            options = onnxtrain.Options(memory_budget=what.rsplit("-", 1)[1], **common)
        else:
            options = onnxtrain.Options(memory_opt_level=int(what[-1]), **common)
        model = onnxtrain.Module(model, options)
    return model, torch.optim.AdamW(model.parameters(), lr=1e-3)


def measure(config, steps):
    """One configuration in this process: (ms per step, peak RSS growth MiB, first step s)."""
    import torch

    model, opt = build(config)
    idx = torch.randint(0, 8192, (8, 128))
    tgt = torch.roll(idx, -1, 1)
    gc.collect()
    base = rss_mib("VmRSS")

    def step():
        loss = model(idx, tgt)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    t = time.perf_counter()
    step()  # export or compile
    first = time.perf_counter() - t
    step()  # the optimizer's state
    gc.collect()
    reset_peak_rss()
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        step()
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times), rss_mib("VmHWM") - base, first


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--only", default="", help="comma-separated configurations (default: all)")
    p.add_argument("--measure", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.measure:
        print(*measure(args.measure, args.steps))
        return
    configs = args.only.split(",") if args.only else CONFIGS
    res = {c: [] for c in configs}
    for _ in range(args.rounds):
        for c in configs:
            out = subprocess.run([sys.executable, __file__, "--measure", c, "--steps", str(args.steps)],
                                 capture_output=True, text=True)
            if out.returncode != 0:
                raise SystemExit(f"{c} failed:\n{out.stderr[-3000:]}")
            res[c].append([float(x) for x in out.stdout.split()[-3:]])
    med = {c: [statistics.median(col) for col in zip(*res[c])] for c in configs}
    ref = med.get("eager")
    print(f"GPT dim 384, 6 layers, 6 heads, 8x128, vocab 8192, dropout 0.1, AdamW; 2 threads; each configuration "
          f"in its own process, alternating; medians of {args.rounds} runs of {args.steps} steps")
    print(f"{'':24}{'ms/step':>9}{'/eager':>8}{'peak RSS +MiB':>15}{'/eager':>8}{'first step s':>14}")
    for c in configs:
        ms, rss, first = med[c]
        t_rel = f"{ms / ref[0]:8.2f}" if ref else " " * 8
        m_rel = f"{rss / ref[1]:8.2f}" if ref else " " * 8
        print(f"{c:24}{ms:9.1f}{t_rel}{rss:15.1f}{m_rel}{first:14.2f}")
    if all(c in med for c in ["eager", "compile", "eager-checkpoint", "onnxtrain-l0", "onnxtrain-l1"]):
        l0, l1 = med["onnxtrain-l0"], med["onnxtrain-l1"]
        print(f"targets: level 0 peak RSS growth / torch.compile's {l0[1] / med['compile'][1]:.2f} (<= 1), "
              f"step time / eager {l0[0] / ref[0]:.2f} (<= 1); level 1 peak RSS growth / eager + checkpoint's "
              f"{l1[1] / med['eager-checkpoint'][1]:.2f} (<= 0.8), step time / eager {l1[0] / ref[0]:.2f} (<= 1.10)")

if __name__ == "__main__":
    main()
