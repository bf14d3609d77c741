"""The memory optimizer on the example GPT: stash, peak memory and step time for no plan, levels 1 and 2, stash
budgets of 50% and 25%, a budget on the step's peak and every candidate recomputed, next to PyTorch eager with
and without torch.utils.checkpoint per block. Each configuration runs in its own process; ratios are against
onnxtrain without plans and against PyTorch eager."""

import os
import subprocess
import sys

import torch
from torch.utils.checkpoint import checkpoint

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "python"))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
sys.path.insert(0, os.path.dirname(__file__))
import onnxtrain  # noqa: E402
from models import GPT  # noqa: E402
from train_gpt import CharLM  # noqa: E402
from train_gpt_bench import train_steps  # noqa: E402

DIM, LAYERS, BATCH, BLOCK = 256, 6, 16, 128
PEAK_BUDGET = "180MiB"  # the whole step's predicted peak (parameters, gradients, stash, transient): 263 MiB without plans


class Checkpointed(torch.nn.Module):
    def __init__(self, block):
        super().__init__()
        self.block = block

    def forward(self, x):
        return checkpoint(self.block, x, use_reentrant=False)


def saved_bytes(model, data):
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen = {}

    def pack(t):
        if t.untyped_storage().data_ptr() not in params:
            seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss, _ = model(*data)
    loss.backward()
    return sum(seen.values())


def run(config, steps=6):
    torch.manual_seed(0)
    model = CharLM(GPT(vocab=96, dim=DIM, heads=4, layers=LAYERS, block=BLOCK)).train()
    idx = torch.randint(0, 96, (BATCH, BLOCK))
    data = (idx, torch.roll(idx, -1, 1))
    stash = 0
    if config.startswith("eager"):
        if config == "eager+checkpoint":
            model.gpt.blocks = torch.nn.ModuleList(Checkpointed(b) for b in model.gpt.blocks)
        stash = saved_bytes(model, data)
    else:
        options = {"none": {}, "level 1": {"memory_opt_level": 1}, "level 2": {"memory_opt_level": 2},
                   "budget 50%": {"memory_budget": "0.5"}, "budget 25%": {"memory_budget": "0.25"},
                   f"budget {PEAK_BUDGET}": {"memory_budget": PEAK_BUDGET}}.get(config)
        if options is None:  # every candidate
            probe = onnxtrain.Module(CharLM(GPT(vocab=96, dim=DIM, heads=4, layers=LAYERS, block=BLOCK)).train())
            probe(*data)
            clusters = sorted({line.split(" | ")[0] for line in probe.memory_report().splitlines()[1:] if " | " in line})
            options = {"memory_opt_config": ",".join(f"{c}:1:-1" for c in clusters)}
        model = onnxtrain.Module(model, onnxtrain.Options(**options))
    onnxtrain.reset_peak_stats()
    ms, rss = train_steps(model, data, steps)
    peak = 0.0
    if not config.startswith("eager"):
        stash = model.last_stash_bytes()
        peak = onnxtrain.allocator_stats()["peak_allocated"] / 2**20
    return ms, stash / 2**20, rss, peak


def main():
    if len(sys.argv) > 2 and sys.argv[1] == "--one":
        print(*run(sys.argv[2]))
        return
    configs = ["none", "level 1", "level 2", "budget 50%", "budget 25%", f"budget {PEAK_BUDGET}", "all candidates",
               "eager", "eager+checkpoint"]
    res = {}
    for c in configs:
        out = subprocess.run([sys.executable, __file__, "--one", c], capture_output=True, text=True, check=True).stdout
        res[c] = [float(x) for x in out.split()[-4:]]
    print(f"GPT dim {DIM}, {LAYERS} layers, batch {BATCH}x{BLOCK}, AdamW, {torch.get_num_threads()} threads, median of 6 steps")
    print("peak MiB: onnxtrain's allocator peak of the step (activations, stash, gradients; parameters and AdamW state "
          "are PyTorch's); stash of eager: its saved tensors")
    print(f"{'':22}{'ms/step':>9}{'stash MiB':>11}{'peak MiB':>10}{'peak RSS +MiB':>15}{'time/none':>11}"
          f"{'stash/none':>12}{'time/eager':>12}{'time/eager+ckpt':>17}")
    t0, s0, _, _ = res["none"]
    te, tc = res["eager"][0], res["eager+checkpoint"][0]
    for c in configs:
        t, s, r, p = res[c]
        peak = f"{p:10.1f}" if p else f"{'-':>10}"
        print(f"{c:22}{t:9.1f}{s:11.1f}{peak}{r:15.1f}{t / t0:11.2f}{s / s0:12.2f}{t / te:12.2f}{t / tc:17.2f}")


if __name__ == "__main__":
    main()
