"""Exports a small GPT from PyTorch, runs it with onnxtrain at two batch sizes, and shows
the symbolic input shapes, the predicted and measured memory peak, and the match with PyTorch."""

import argparse
import logging
import os
import sys
import tempfile
import time

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "python"))
import onnxtrain  # noqa: E402
from export_util import export  # noqa: E402
from models import GPT  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--seq", type=int, default=64)
    args = p.parse_args()
    logging.getLogger("torch.onnx").setLevel(logging.ERROR)
    torch.manual_seed(0)
    model = GPT(vocab=65, dim=args.dim, heads=4, layers=args.layers, block=args.seq).eval()
    with tempfile.TemporaryDirectory() as d:
        t = time.perf_counter()
        path = export(model, (torch.randint(0, 65, (2, 16)),), os.path.join(d, "gpt.onnx"), ["idx"],
                      {"idx": {0: "batch", 1: "seq"}})
        print(f"exported with torch.onnx.export in {time.perf_counter() - t:.1f} s")
        session = onnxtrain.Session(path)
    print(f"inputs: {session.input_types()}")
    print(f"{'batch':>6}{'seq':>6}{'predicted peak MiB':>20}{'measured peak MiB':>19}{'max rel. error':>16}{'ms':>8}")
    for batch in (4, 16):
        idx = torch.randint(0, 65, (batch, args.seq))
        predicted = session.predicted_peak({"idx": [batch, args.seq]})
        onnxtrain.reset_peak_stats()
        before = onnxtrain.allocator_stats()["allocated"]
        t = time.perf_counter()
        logits = session.run({"idx": idx.numpy()})[session.output_names[0]]
        ms = (time.perf_counter() - t) * 1e3
        measured = onnxtrain.allocator_stats()["peak_allocated"] - before
        with torch.no_grad():
            want = model(idx).numpy()
        err = np.abs(logits - want).max() / np.abs(want).max()
        print(f"{batch:6d}{args.seq:6d}{predicted / 2**20:20.2f}{measured / 2**20:19.2f}{err:16.1e}{ms:8.1f}")


if __name__ == "__main__":
    main()
