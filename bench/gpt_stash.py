"""Bytes kept for backward by one training forward of the GPT-like model: onnxtrain's RunState next to
what PyTorch eager saves (torch.autograd.graph.saved_tensors_hooks, each storage counted once)."""

import argparse
import os
import sys
import tempfile

import onnx
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "python"))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
import onnxtrain  # noqa: E402
from export_util import export_training  # noqa: E402
from gpt import GPT  # noqa: E402
from models import WithLoss  # noqa: E402


def torch_saved_bytes(module, args, params):
    seen = {}

    def pack(t):
        storage = t.untyped_storage()
        if storage.data_ptr() not in params:  # parameters are not activations
            seen[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = module(*args)
    loss.backward()
    return sum(seen.values())


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--layers", type=int, default=4)
    args = p.parse_args()
    torch.manual_seed(0)
    module = WithLoss(GPT(vocab=65, dim=args.dim, heads=4, layers=args.layers, block=args.seq)).train()
    idx = torch.randint(0, 65, (args.batch, args.seq))
    target = torch.roll(idx, -1, 1)
    with tempfile.TemporaryDirectory() as d:
        path = export_training(module, (idx, target), os.path.join(d, "gpt.onnx"), ["idx", "target"],
                               {"idx": {0: "b", 1: "t"}, "target": {0: "b", 1: "t"}}, ["loss"])
        model = onnx.load(path)
    names = dict(module.named_parameters())
    wrt = [i.name for i in model.graph.initializer if i.name in names]
    session = onnxtrain.Session.for_training(model.SerializeToString(), wrt, "loss")
    _, state = session.run_forward({"idx": idx.numpy(), "target": target.numpy()})
    ours = state.stash_bytes
    theirs = torch_saved_bytes(module, (idx, target), {q.untyped_storage().data_ptr() for q in module.parameters()})
    print(f"GPT stash, batch {args.batch}, seq {args.seq}, dim {args.dim}, {args.layers} layers")
    print(f"{'':28}{'MiB':>10}")
    print(f"{'onnxtrain RunState':28}{ours / 2**20:10.2f}")
    print(f"{'PyTorch eager saved tensors':28}{theirs / 2**20:10.2f}")
    print(f"onnxtrain / PyTorch: {ours / theirs:.2f}")


if __name__ == "__main__":
    main()
