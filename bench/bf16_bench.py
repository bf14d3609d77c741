"""bfloat16 side by side with PyTorch, same threads, in one run: the GEMM (1024^3 and the GPT's shapes) against
torch's bf16 matmul, interleaved; then GPT training steps (dim 384, 6 layers, 8x128, vocab 8192, AdamW) in four
configurations, each step measured in its own process, configurations alternating: eager float32, eager under
bf16 autocast, onnxtrain float32, onnxtrain under bf16 autocast (step time, peak RSS growth, level-0 stash)."""

import contextlib
import os
import resource
import statistics
import subprocess
import sys
import time

import torch
from onnx import TensorProto, helper

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
import onnxtrain  # noqa: E402
from gpt import GPT  # noqa: E402
from train_gpt import CharLM  # noqa: E402

GEMMS = [  # (batch, m, k, n): what they are
    ((1, 1024, 1024, 1024), "1024^3"),
    ((1, 1024, 384, 1152), "GPT qkv (8x128 rows)"),
    ((1, 1024, 384, 1536), "GPT MLP up"),
    ((1, 1024, 1536, 384), "GPT MLP down"),
    ((1, 1024, 384, 8192), "GPT head (vocab 8192)"),
    ((48, 128, 64, 128), "GPT attention scores"),
]


def matmul_session():
    """onnxtrain running one bf16 MatMul of any sizes."""
    a = helper.make_tensor_value_info("a", TensorProto.BFLOAT16, ["b", "m", "k"])
    b = helper.make_tensor_value_info("b", TensorProto.BFLOAT16, ["b", "k", "n"])
    y = helper.make_tensor_value_info("y", TensorProto.BFLOAT16, None)
    graph = helper.make_graph([helper.make_node("MatMul", ["a", "b"], ["y"])], "mm", [a, b], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    return onnxtrain.Session.from_bytes(model.SerializeToString())


def gflops(fn, flops, reps):
    fn()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return flops / statistics.median(times) / 1e9


def gemm_table():
    session = matmul_session()
    print(f"bf16 GEMM, {torch.get_num_threads()} threads, GFLOP/s (median of 3 interleaved rounds of 10 calls each)")
    print(f"{'shape':26}{'what':24}{'torch':>8}{'onnxtrain':>11}{'ratio':>8}")
    for (nb, m, k, n), what in GEMMS:
        a = torch.randn(nb, m, k).to(torch.bfloat16)
        b = torch.randn(nb, k, n).to(torch.bfloat16)
        flops = 2 * nb * m * n * k
        reps = max(3, int(2e10 / flops))
        ours, theirs = [], []
        for _ in range(3):
            theirs.append(gflops(lambda: torch.matmul(a, b), flops, reps))
            ours.append(gflops(lambda: session.run({"a": a, "b": b}), flops, reps))
        t, o = statistics.median(theirs), statistics.median(ours)
        shape = f"{nb}x{m}x{k}x{n}" if nb > 1 else f"{m}x{k}x{n}"
        print(f"{shape:26}{what:24}{t:8.0f}{o:11.0f}{o / t:8.2f}")


def train(impl, precision, steps=6):
    """One configuration alone in this process: (ms/step, peak RSS growth MiB, stash MiB)."""
    torch.manual_seed(0)
    model = CharLM(GPT(vocab=8192, dim=384, heads=6, layers=6, block=128)).train()
    if impl == "onnxtrain":
        model = onnxtrain.Module(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    idx = torch.randint(0, 8192, (8, 128))
    tgt = torch.roll(idx, -1, 1)
    autocast = torch.autocast("cpu", dtype=torch.bfloat16) if precision == "bf16" else contextlib.nullcontext()
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    times = []
    for i in range(steps + 2):
        t = time.perf_counter()
        with autocast:
            loss = model(idx, tgt)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if i >= 2:
            times.append((time.perf_counter() - t) * 1e3)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - rss0
    stash = model.last_stash_bytes() / 2**20 if impl == "onnxtrain" else float("nan")
    return statistics.median(times), rss, stash


def train_table(rounds=3):
    configs = [("eager", "f32"), ("eager", "bf16"), ("onnxtrain", "f32"), ("onnxtrain", "bf16")]
    res = {c: [] for c in configs}
    for _ in range(rounds):
        for c in configs:
            out = subprocess.run([sys.executable, __file__, "--train", *c], capture_output=True, text=True,
                                 check=True).stdout.split()
            res[c].append([float(x) for x in out[-3:]])
    med = {c: [statistics.median(col) for col in zip(*res[c])] for c in configs}
    print(f"\nGPT training step (dim 384, 6 layers, 6 heads, 8x128, vocab 8192, AdamW), {torch.get_num_threads()} "
          f"threads, each configuration in its own process, alternating, median of {rounds} runs of 6 steps")
    print(f"{'':22}{'ms/step':>9}{'/eager f32':>12}{'/eager bf16':>13}{'peak RSS +MiB':>15}{'stash MiB':>11}")
    for c in configs:
        ms, rss, stash = med[c]
        print(f"{c[0] + ' ' + c[1]:22}{ms:9.1f}{ms / med[('eager', 'f32')][0]:12.2f}"
              f"{ms / med[('eager', 'bf16')][0]:13.2f}{rss:15.1f}{stash:11.1f}")
    stash_ratio = med[("onnxtrain", "bf16")][2] / med[("onnxtrain", "f32")][2]
    print(f"onnxtrain bf16 / eager bf16 step time: {med[('onnxtrain', 'bf16')][0] / med[('eager', 'bf16')][0]:.2f}"
          f" (target <= 0.80); onnxtrain level-0 stash bf16 / f32: {stash_ratio:.2f} (target <= 0.55)")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--train":
        print(*train(*sys.argv[2:4]))
    else:
        gemm_table()
        train_table()
