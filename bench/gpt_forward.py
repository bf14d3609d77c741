"""GPT forward: onnxtrain Session next to PyTorch eager, same threads, same run."""

import argparse
import os
import statistics
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
import onnxtrain  # noqa: E402
from export_util import export  # noqa: E402
from gpt import GPT  # noqa: E402


def median_ms(fn, reps):
    fn()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--dim", type=int, default=256)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--reps", type=int, default=20)
    args = p.parse_args()
    threads = torch.get_num_threads()
    torch.manual_seed(0)
    model = GPT(vocab=65, dim=args.dim, heads=8, layers=args.layers, block=args.seq).eval()
    idx = torch.randint(0, 65, (args.batch, args.seq))
    with tempfile.TemporaryDirectory() as d:
        path = export(model, (idx,), os.path.join(d, "gpt.onnx"), ["idx"], {"idx": {0: "batch", 1: "seq"}})
        session = onnxtrain.Session(path)
    feeds = {"idx": idx.numpy()}
    ours = median_ms(lambda: session.run(feeds), args.reps)
    with torch.no_grad():
        eager = median_ms(lambda: model(idx), args.reps)
    print(f"GPT forward, batch {args.batch}, seq {args.seq}, dim {args.dim}, {args.layers} layers, "
          f"{threads} threads, median of {args.reps}")
    print(f"{'':24}{'ms':>10}")
    print(f"{'onnxtrain Session':24}{ours:10.2f}")
    print(f"{'PyTorch eager':24}{eager:10.2f}")
    print(f"onnxtrain time / PyTorch time: {ours / eager:.2f}")


if __name__ == "__main__":
    main()
