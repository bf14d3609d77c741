"""The memory optimizer on the example GPT: stash, peak memory and step time for no plan, levels 1 and 2, stash
budgets of 50% and 25%, a budget on the step's peak and every candidate recomputed, next to PyTorch eager with
and without torch.utils.checkpoint per block.

Every configuration lives in this one process and they take training steps in turn, round after round, so that
the machine's drifts (it is shared) hit them alike; times are medians over the rounds. Ratios are medians of the
rounds' own ratios (each step against the same round's step without plans, or of eager), which cancels drifts
slower than a round; "(min)" is the ratio of the fastest steps."""

import argparse
import logging
import os
import statistics
import sys
import time

import torch
from torch.utils.checkpoint import checkpoint

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
import onnxtrain  # noqa: E402
from gpt import GPT  # noqa: E402
from train_gpt import CharLM  # noqa: E402

DIM, LAYERS, BATCH, BLOCK = 256, 6, 16, 128
# The whole step's predicted peak (parameters, gradients, stash, transient): 263 MiB without plans.
PEAK_BUDGET = "180MiB"


class Checkpointed(torch.nn.Module):
    def __init__(self, block):
        super().__init__()
        self.block = block

    def forward(self, x):
        return checkpoint(self.block, x, use_reentrant=False)


def saved_bytes(model, data):
    """Bytes of the activations PyTorch's autograd saves for backward (parameters excluded)."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen = {}

    def pack(t):
        if t.untyped_storage().data_ptr() not in params:
            seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = model(*data)
    loss.backward()
    return sum(seen.values())


def every_cluster(data):
    probe = onnxtrain.Module(CharLM(GPT(vocab=96, dim=DIM, heads=4, layers=LAYERS, block=BLOCK)).train())
    probe(*data)
    clusters = {line.split(" | ")[0] for line in probe.memory_report().splitlines()[1:] if line.count(" | ") > 4}
    return ",".join(f"{c}:2:-1" for c in sorted(clusters))


def build(config, data):
    torch.manual_seed(0)
    model = CharLM(GPT(vocab=96, dim=DIM, heads=4, layers=LAYERS, block=BLOCK)).train()
    if config == "eager+checkpoint":
        model.gpt.blocks = torch.nn.ModuleList(Checkpointed(b) for b in model.gpt.blocks)
    if not config.startswith("eager"):
        options = {"none": {}, "level 1": {"memory_opt_level": 1}, "level 2": {"memory_opt_level": 2},
                   "budget 50%": {"memory_budget": "0.5"}, "budget 25%": {"memory_budget": "0.25"},
                   f"budget {PEAK_BUDGET}": {"memory_budget": PEAK_BUDGET},
                   "all candidates": {"memory_opt_config": every_cluster(data)}}[config]
        model = onnxtrain.Module(model, onnxtrain.Options(**options))
    return model, torch.optim.AdamW(model.parameters(), lr=1e-3)


def step(model, opt, data):
    """One AdamW step: (seconds, onnxtrain allocator peak above its level before the step)."""
    onnxtrain.reset_peak_stats()
    base = onnxtrain.allocator_stats()["allocated"]
    t = time.perf_counter()
    loss = model(*data)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return time.perf_counter() - t, onnxtrain.allocator_stats()["peak_allocated"] - base


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--rounds", type=int, default=10)
    args = p.parse_args()
    logging.getLogger("onnxtrain").setLevel(logging.ERROR)  # the reports: see onnxtrain plan or model.memory_report()
    torch.manual_seed(0)
    idx = torch.randint(0, 96, (BATCH, BLOCK))
    data = (idx, torch.roll(idx, -1, 1))
    configs = ["none", "level 1", "level 2", "budget 50%", "budget 25%", f"budget {PEAK_BUDGET}", "all candidates",
               "eager", "eager+checkpoint"]
    runs = {c: build(c, data) for c in configs}
    stash = {c: saved_bytes(runs[c][0], data) for c in configs if c.startswith("eager")}
    times, peaks = {c: [] for c in configs}, {}
    for r in range(args.rounds + 2):  # two warm-up rounds: export, first allocations
        for c in configs:
            seconds, peak = step(*runs[c], data)
            if r >= 2:
                times[c].append(seconds * 1e3)
                peaks[c] = peak
    for c in configs:
        if not c.startswith("eager"):
            stash[c] = runs[c][0].last_stash_bytes()
    print(f"GPT dim {DIM}, {LAYERS} layers, batch {BATCH}x{BLOCK}, AdamW, {torch.get_num_threads()} threads; "
          f"configurations in turn, median of {args.rounds} rounds")
    print("peak MiB: onnxtrain's allocator peak of the step (activations, stash, gradients; parameters and AdamW state "
          "are PyTorch's); stash of eager: its saved tensors")
    print("time ratios: medians of each round's ratio; (min): the ratio of the fastest steps, which noise only slows")
    print(f"{'':22}{'ms/step':>9}{'stash MiB':>11}{'peak MiB':>10}{'time/none':>11}{'(min)':>7}{'stash/none':>12}"
          f"{'time/eager':>12}{'time/eager+ckpt':>17}")
    med = {c: statistics.median(times[c]) for c in configs}
    fastest = {c: min(times[c]) for c in configs}

    def ratio(c, base):  # the median of the rounds' ratios
        return statistics.median(t / b for t, b in zip(times[c], times[base]))

    for c in configs:
        s = stash[c] / 2**20
        peak = f"{peaks[c] / 2**20:10.1f}" if not c.startswith("eager") else f"{'-':>10}"
        print(f"{c:22}{med[c]:9.1f}{s:11.1f}{peak}{ratio(c, 'none'):11.2f}{fastest[c] / fastest['none']:7.2f}"
              f"{stash[c] / stash['none']:12.2f}{ratio(c, 'eager'):12.2f}{ratio(c, 'eager+checkpoint'):17.2f}")

if __name__ == "__main__":
    main()
