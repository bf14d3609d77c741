"""Attention alone on one CUDA device (issue 29's fused attention): scaled_dot_product_attention's forward and
backward at GPT-2's shape (batch 16, 12 heads, 1024 tokens, heads of 64, causal, bf16) through onnxtrain.Module,
beside PyTorch eager (its own flash kernel) and torch.compile, and onnxtrain on its warp-per-row kernels
(ONNXTRAIN_CUDA_ATTENTION=simple: onnxtrain-simple) and on its tensor-core kernels' general build alone
(ONNXTRAIN_CUDA_ATTENTION=general: onnxtrain-general; onnxtrain takes the lean build where no tile of the mask reads
it score by score), each configuration in its own process.

--dropout P drops attention's probabilities with ratio P (as GPT-2's attn_pdrop, 0.1), in every configuration;
--mask tensor passes the causal mask as a boolean tensor of a batch's own (batch, 1, tokens, tokens), as a model
that builds its mask from a padding mask does, instead of is_causal.

Printed per configuration: ms per forward and backward (the median of --steps), TFLOP/s (4 x batch x heads x
tokens^2 x head for the forward's two products, halved for the causal mask, times 3.5 for forward and backward),
the ratio of its time to eager's, the first call's seconds, and for onnxtrain whether the graph it ran holds the
fused FlashAttention.

    python bench/gpu_attention.py [--batch 16] [--heads 12] [--seq 1024] [--head 64] [--dtype bf16|fp16|fp32]
                                  [--dropout 0.1] [--mask causal|tensor] [--steps 20] [--only eager,onnxtrain]
                                  [--tiny]

--tiny runs a small shape anywhere (the CPU too): a check of the script, not a figure of record.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

CONFIGS = ["eager", "compile", "onnxtrain", "onnxtrain-simple", "onnxtrain-general"]
DTYPES = ["bf16", "fp16", "fp32"]


def attention_module(dropout):
    import torch

    class Attention(torch.nn.Module):
        def forward(self, q, k, v, mask=None):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout,
                                                                    is_causal=mask is None)

    return Attention()


def measure(name, args):
    """One configuration in this process: its figures as a dict."""
    import onnx
    import torch

    import onnxtrain

    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[args.dtype]
    shape = (args.batch, args.heads, args.seq, args.head)
    q, k, v = (torch.randn(shape, device=device, dtype=dtype, requires_grad=True) for _ in range(3))
    dy = torch.randn(shape, device=device, dtype=dtype)
    mask = None
    if args.mask == "tensor":
        causal = torch.ones(args.seq, args.seq, dtype=torch.bool, device=device).tril()
        mask = causal.expand(args.batch, 1, args.seq, args.seq).contiguous()
    saved = tempfile.mkdtemp(prefix="onnxtrain-attention-")
    module = attention_module(args.dropout)
    if name.startswith("onnxtrain"):
        module = onnxtrain.Module(module, onnxtrain.Options(save_onnx=saved))
    elif name == "compile":
        module = torch.compile(module)
    sync = torch.cuda.synchronize if cuda else (lambda: None)

    def step():
        for x in (q, k, v):
            x.grad = None
        (module(q, k, v) if mask is None else module(q, k, v, mask)).backward(dy)
        sync()

    t = time.perf_counter()
    step()
    first = time.perf_counter() - t
    step()
    times = []
    for _ in range(args.steps):
        t = time.perf_counter()
        step()
        times.append(time.perf_counter() - t)
    out = {"ms": statistics.median(times) * 1e3, "first": first}
    if cuda:
        out["device"] = torch.cuda.get_device_name()
    graphs = [f for f in os.listdir(saved) if f.endswith("_train_optimized.onnx")]
    if graphs:
        ops = {n.op_type for n in onnx.load(os.path.join(saved, graphs[0])).graph.node}
        out["fused"] = "FlashAttention" in ops and "Softmax" not in ops
    return out


def run(name, args):
    """measure() in a process of its own."""
    cmd = [sys.executable, __file__, "--measure", name, "--batch", str(args.batch), "--heads", str(args.heads),
           "--seq", str(args.seq), "--head", str(args.head), "--dtype", args.dtype, "--steps", str(args.steps),
           "--dropout", str(args.dropout), "--mask", args.mask]
    env = dict(os.environ, ONNXTRAIN_CUDA_ATTENTION=name.removeprefix("onnxtrain-") if "-" in name else "")
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if out.returncode != 0:
        print(f"{name} failed:\n{out.stderr[-3000:]}", flush=True)
        return None
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--head", type=int, default=64)
    p.add_argument("--dtype", default="bf16", choices=DTYPES)
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--mask", default="causal", choices=["causal", "tensor"])
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--only", default="", help="comma-separated configurations (default: all)")
    p.add_argument("--tiny", action="store_true")
    p.add_argument("--measure", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.tiny:
        args.batch, args.heads, args.seq, args.head = 1, 2, 80, 16
    if args.measure:
        print(json.dumps(measure(args.measure, args)))
        return
    configs = args.only.split(",") if args.only else CONFIGS
    unknown = set(configs) - set(CONFIGS)
    if unknown:
        p.error(f"unknown configurations {sorted(unknown)}: choose among {CONFIGS}")
    flops = 3.5 * 4 * args.batch * args.heads * args.seq**2 * args.head / 2
    results = {c: run(c, args) for c in configs}
    device = next((m["device"] for m in results.values() if m and "device" in m), "the CPU")
    print(f"\nattention forward and backward on {device}: batch {args.batch}, {args.heads} heads, {args.seq} tokens, "
          f"heads of {args.head}, causal ({'a mask tensor' if args.mask == 'tensor' else 'is_causal'}), "
          f"dropout {args.dropout:g}, {args.dtype}; each configuration in its own process, medians of "
          f"{args.steps} calls")
    print(f"{'':18}{'ms':>9}{'TFLOP/s':>9}{'/eager':>8}{'first s':>9}{'fused':>7}")
    eager = results.get("eager")
    for c, m in results.items():
        if not m:
            continue
        rel = f"{m['ms'] / eager['ms']:8.2f}" if eager else " " * 8
        fused = {True: "yes", False: "no"}.get(m.get("fused"), "")
        print(f"{c:18}{m['ms']:9.3f}{flops / (m['ms'] * 1e-3) / 1e12:9.2f}{rel}{m['first']:9.1f}{fused:>7}",
              flush=True)


if __name__ == "__main__":
    main()
