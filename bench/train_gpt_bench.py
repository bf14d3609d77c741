"""Training steps of the example GPT at two sizes: onnxtrain.Module next to PyTorch eager in one run, same
threads: step time, peak memory (process RSS growth and onnxtrain's allocator peak) and their ratios."""

import os
import resource
import statistics
import subprocess
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
import onnxtrain  # noqa: E402
from gpt import GPT  # noqa: E402
from train_gpt import CharLM  # noqa: E402


def train_steps(model, data, steps):
    """AdamW steps of a CharLM on one batch: (median ms/step after two warm-up steps, peak RSS growth MiB)."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    times = []
    for i in range(steps + 2):
        t = time.perf_counter()
        loss = model(*data)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if i >= 2:  # the first calls export and warm up
            times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - rss0


def measure(impl, dim, layers, batch, block, steps=8):
    """One implementation at one size, alone in this process: (ms/step, peak RSS growth MiB, allocator peak MiB)."""
    torch.manual_seed(0)
    model = CharLM(GPT(vocab=96, dim=dim, heads=4, layers=layers, block=block)).train()
    if impl == "onnxtrain":
        model = onnxtrain.Module(model)
    idx = torch.randint(0, 96, (batch, block))
    ms, rss = train_steps(model, (idx, torch.roll(idx, -1, 1)), steps)
    return ms, rss, onnxtrain.allocator_stats()["peak_allocated"] / 2**20


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--one":
        impl, *dims = sys.argv[2:]
        print(*measure(impl, *map(int, dims)))
        return
    rounds = 3
    print(f"GPT training step, AdamW, {torch.get_num_threads()} threads, median of 8 steps, "
          "each run in its own process; "
          f"eager and onnxtrain alternate, {rounds} runs each, medians")
    print(f"{'size':28}{'':12}{'ms/step':>10}{'peak RSS +MiB':>15}{'alloc peak MiB':>16}")
    for dims in [(128, 4, 16, 64), (256, 6, 16, 128)]:
        res = {"eager": [], "onnxtrain": []}
        for _ in range(rounds):
            for impl in res:
                out = subprocess.run([sys.executable, __file__, "--one", impl, *map(str, dims)], capture_output=True,
                                     text=True, check=True).stdout.split()
                res[impl].append([float(x) for x in out[-3:]])
        medians = {i: [statistics.median(col) for col in zip(*res[i])] for i in res}
        (t_e, r_e, _), (t_o, r_o, a_o) = medians["eager"], medians["onnxtrain"]
        label = f"dim {dims[0]}, {dims[1]} layers, {dims[2]}x{dims[3]}"
        print(f"{label:28}{'eager':12}{t_e:10.1f}{r_e:15.1f}{'':>16}")
        print(f"{'':28}{'onnxtrain':12}{t_o:10.1f}{r_o:15.1f}{a_o:16.1f}")
        print(f"{'':28}{'ratio':12}{t_o / t_e:10.2f}{r_o / r_e:15.2f}")


if __name__ == "__main__":
    main()
