"""The GPU benchmark of record (issue 29): a real-size model (bench/real_size.py's: GPT-2 124M by default, or the
135M Llama) trained on one CUDA device by onnxtrain beside PyTorch's eager and torch.compile, float32 and bf16
autocast, PyTorch's AdamW(fused=True), each configuration in its own process (configurations alternate over rounds,
figures are medians).

Printed per configuration: s/step, the host's part of it (host s: from the step's start until its last call returns,
before the device is waited for: where it nears s/step, the device waits on the host), tokens/s and its ratio to eager's
(eager-bf16's for bf16), MFU (6 x the parameters the products read x tokens, plus 12 x layers x width x sequence per
token for attention, over the device's dense peak for the dtype: --peak-tflops to give it), the first step, the step's
peak of torch.cuda.max_memory_allocated above what was allocated before it (in a step of its own, after the timed ones,
with onnxtrain's free segments handed back to PyTorch first, so that it counts every segment onnxtrain takes in the
step; onnxtrain's memory counts there when it comes from PyTorch's allocator: the header says), and for onnxtrain its
allocator's step peak as predicted before the first step and as measured, and the copies it made from the GPU to the
host per timed step (0 for a static step).

--headline replays the seeds' claim: torch.cuda.set_per_process_memory_fraction is set where eager-bf16 just fits
batch B (its peak reserved memory, plus 2%); eager-bf16 at 2B is tried under it, then onnxtrain under bf16 autocast
at 2B with onnxtrain.optim.AdamW(in_backward=True) (no recompute: each gradient freed at its update), level 1, both,
level 2, and budgets of a third and a tenth of the stash, until one fits: its tokens/s beside eager's at B.

    python bench/gpu.py [--model gpt2|llama] [--batch 16] [--seq 1024] [--steps 10] [--rounds 1] [--only a,b]
                        [--headline] [--tiny]

Configuration names follow bench/real_size.py's grammar (onnxtrain-l1-0.3-bf16). --tiny runs a two-layer model of
the kind (anywhere, the CPU too: a check of the script, not a figure of record).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from real_size import VOCAB, build, parse, train_step  # noqa: E402

CONFIGS = ["eager", "eager-bf16", "compile", "compile-bf16", "onnxtrain-l0", "onnxtrain-l1", "onnxtrain-bf16",
           "onnxtrain-l1-bf16"]
HEADLINE_TRIES = ["onnxtrain-inbw-bf16", "onnxtrain-l1-bf16", "onnxtrain-l1-inbw-bf16", "onnxtrain-l2-bf16",
                  "onnxtrain-0.3-bf16", "onnxtrain-0.1-bf16"]
# Dense peak TFLOPS (no sparsity) by device name: bf16, float32 without TF32.
PEAKS = {"H100 PCIe": (756, 51), "H100": (989, 67), "H200": (989, 67), "A100": (312, 19.5)}
MIB = 2**20


def flops_per_token(model, seq):
    """6 x the parameters the products read (position embeddings are looked up, not multiplied) + attention's."""
    config = model.config
    matmul = sum(p.numel() for n, p in model.named_parameters() if "wpe" not in n and "position" not in n)
    width = getattr(config, "hidden_size", None) or config.n_embd
    layers = getattr(config, "num_hidden_layers", None) or config.n_layer
    return 6 * matmul + 12 * layers * width * seq


def measure(name, config, batch, seq, steps, tiny, fraction):
    """One configuration in this process: its figures as a dict ({"oom": ...} when it does not fit)."""
    import torch

    import onnxtrain
    from onnxtrain import _onnxtrain as C

    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    if fraction:
        torch.cuda.set_per_process_memory_fraction(fraction)
    model, opt = build(name, config, device, tiny)
    ids = torch.randint(0, VOCAB[name], (batch, seq), device=device)
    bf16 = parse(config)["bf16"]
    sync = torch.cuda.synchronize if cuda else (lambda: None)

    def step():
        return train_step(model, opt, ids, device, bf16)

    try:
        t = time.perf_counter()
        step()
        sync()
        first = time.perf_counter() - t
        step()  # the optimizer's state
        sync()
        copied_before = C.cuda_copies_to_host() if cuda else 0
        times, host, ours, peak = [], [], 0, 0
        for _ in range(steps):  # (the last step's gradients freed first: what is allocated before a step holds none)
            opt.zero_grad(set_to_none=True)
            onnxtrain.reset_peak_stats(device)
            before = onnxtrain.allocator_stats(device)["allocated"]
            t = time.perf_counter()
            loss = step()
            host.append(time.perf_counter() - t)
            sync()
            times.append(time.perf_counter() - t)
            ours = max(ours, onnxtrain.allocator_stats(device)["peak_allocated"] - before)
        copies = (C.cuda_copies_to_host() - copied_before) / steps if cuda else 0
        if cuda:  # PyTorch's figure from one more step, onnxtrain's free segments handed back to PyTorch before it: a
            opt.zero_grad(set_to_none=True)  # segment onnxtrain kept would count in the base, not in the step
            onnxtrain.empty_cache(device)
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
            step()
            sync()
            peak = torch.cuda.max_memory_allocated() - base
    except (torch.OutOfMemoryError, onnxtrain.OutOfMemoryError) as e:
        return {"oom": str(e).splitlines()[0][:200]}
    s = statistics.median(times)
    inner = getattr(model, "_orig_mod", model)
    out = {"s": s, "host": statistics.median(host), "tokens_s": batch * seq / s, "first": first, "loss": loss.item(),
           "flops": flops_per_token(getattr(inner, "module", inner), seq) * batch * seq / s}
    if cuda:
        out.update(copies=copies, peak=peak / MIB,
                   reserved=torch.cuda.max_memory_reserved() / MIB, device=torch.cuda.get_device_name())
    if isinstance(model, onnxtrain.Module):
        runner = [r for r in model.runners() if r.training][-1]
        out["predicted"] = runner.session.predict_memory(runner.last_dims)["peak"] / MIB
        out["measured"] = ours / MIB
    return out


def run(name, config, args, batch=None, fraction=0.0):
    """measure() in a process of its own."""
    cmd = [sys.executable, __file__, "--measure", name, config, "--batch", str(batch or args.batch), "--seq",
           str(args.seq), "--steps", str(args.steps), "--fraction", str(fraction)] + (["--tiny"] if args.tiny else [])
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        print(f"{name} {config} failed:\n{out.stderr[-3000:]}", flush=True)
        return None
    return json.loads(out.stdout.strip().splitlines()[-1])


def peak_tflops(device, bf16, given):
    if given:
        return given
    for key, peaks in PEAKS.items():
        if key in (device or ""):
            return peaks[0 if bf16 else 1]
    return 0


def table(name, args, configs):
    res = {c: [] for c in configs}
    for _ in range(args.rounds):
        for c in configs:
            m = run(name, c, args)
            if m and "oom" not in m:
                res[c].append(m)
            elif m:
                print(f"{c}: out of memory ({m['oom']})", flush=True)
    med = {c: {k: (statistics.median(r[k] for r in runs) if not isinstance(runs[0][k], str) else runs[0][k])
               for k in runs[0]} for c, runs in res.items() if runs}
    print(f"\n{name}, batch {args.batch}x{args.seq}; each configuration in its own process; medians of "
          f"{args.rounds} run(s) of {args.steps} steps")
    print(f"{'':22}{'s/step':>8}{'host s':>8}{'tokens/s':>10}{'/ref':>6}{'MFU':>6}{'first s':>9}{'peak MiB':>10}"
          f"{'predicted':>11}{'measured':>10}{'loss':>8}{'D2H/step':>9}")
    for c, m in med.items():
        ref = med.get("eager-bf16" if parse(c)["bf16"] else "eager")
        rel = f"{m['tokens_s'] / ref['tokens_s']:6.2f}" if ref else " " * 6
        peak = peak_tflops(m.get("device"), parse(c)["bf16"], args.peak_tflops)
        mfu = f"{m['flops'] / (peak * 1e12):6.2f}" if peak else " " * 6
        mem = f"{m['peak']:10.0f}" if "peak" in m else " " * 10
        pred = f"{m['predicted']:11.1f}{m['measured']:10.1f}" if "predicted" in m else " " * 21
        copies = f"{m['copies']:9.1f}" if "copies" in m and "predicted" in m else ""
        print(f"{c:22}{m['s']:8.3f}{m['host']:8.3f}{m['tokens_s']:10.0f}{rel}{mfu}{m['first']:9.1f}{mem}{pred}"
              f"{m['loss']:8.3f}{copies}", flush=True)


def headline(name, args):
    import torch

    total = torch.cuda.get_device_properties(0).total_memory
    eager = run(name, "eager-bf16", args)
    if not eager or "oom" in eager:
        print(f"headline: eager-bf16 does not run at batch {args.batch}: {eager}")
        return
    fraction = min(1.0, eager["reserved"] * MIB * 1.02 / total)
    print(f"\nheadline ({name}, {args.seq} tokens a sequence): the memory fraction {fraction:.4f} "
          f"({fraction * total / MIB:.0f} MiB) where eager-bf16 just fits batch {args.batch}, at "
          f"{eager['tokens_s']:.0f} tokens/s")
    twice = run(name, "eager-bf16", args, 2 * args.batch, fraction)
    print(f"  eager-bf16 at batch {2 * args.batch}: " + ("out of memory" if twice and "oom" in twice else
                                                         f"runs ({twice})"))
    for config in HEADLINE_TRIES:
        m = run(name, config, args, 2 * args.batch, fraction)
        if m and "oom" not in m:
            print(f"  {config} at batch {2 * args.batch}: {m['tokens_s']:.0f} tokens/s, "
                  f"{m['tokens_s'] / eager['tokens_s']:.2f}x eager-bf16's at batch {args.batch}")
            return
        print(f"  {config} at batch {2 * args.batch}: " + ("out of memory" if m else "failed"))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="gpt2", choices=["gpt2", "llama"])
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--only", default="", help="comma-separated configurations (default: all)")
    p.add_argument("--headline", action="store_true")
    p.add_argument("--tiny", action="store_true")
    p.add_argument("--peak-tflops", type=float, default=0)
    p.add_argument("--measure", nargs=2, help=argparse.SUPPRESS)
    p.add_argument("--fraction", type=float, default=0.0, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.measure:
        print(json.dumps(measure(*args.measure, args.batch, args.seq, args.steps, args.tiny, args.fraction)))
        return
    import torch

    from onnxtrain import _onnxtrain as C

    if torch.cuda.is_available():
        print(f"{torch.cuda.get_device_name()}; torch {torch.__version__}; onnxtrain's CUDA memory from "
              f"{C.cuda_memory_source() or 'nowhere (built without CUDA)'}")
    else:
        print("no CUDA device: the CPU runs it (a check of the script, not a figure of record)")
    table(args.model, args, args.only.split(",") if args.only else CONFIGS)
    if args.headline:
        if torch.cuda.is_available():
            headline(args.model, args)
        else:
            print("headline: needs a CUDA device (a memory fraction)")


if __name__ == "__main__":
    main()
