"""FSDP2 (torch.distributed.fsdp.fully_shard, CPU, gloo, two processes) around a GPT whose blocks run in onnxtrain:
each rank trains on half the batch; the gradients of each step and the parameters after SGD steps equal
single-process training on the whole batch. FSDP2 shards the parameters between calls, gathers them again before
forward and before backward (into new memory): onnxtrain reads them at every call and refeeds them to backward."""

import os
import sys

import torch

import onnxtrain

sys.path.insert(0, os.path.dirname(__file__))
from distributed import finish, join, spawn  # noqa: E402
from models import GPT, WithLoss  # noqa: E402

STEPS = 3


def make_model(onnxtrain_blocks):
    torch.manual_seed(0)
    model = WithLoss(GPT(vocab=65, dim=32, heads=4, layers=2, block=16)).train()
    if onnxtrain_blocks:
        for i, block in enumerate(model.model.blocks):
            # Captured through torch.export (not "auto": a fallback would hide a failure), in the call, after FSDP2's
            # hooks gathered the parameters.
            model.model.blocks[i] = onnxtrain.Module(block, onnxtrain.Options(exporter="torch.export"))
    return model


def batch(step):
    g = torch.Generator().manual_seed(step)
    idx = torch.randint(0, 65, (4, 16), generator=g)
    return idx, torch.roll(idx, -1, 1)


def train(model, part):
    """STEPS SGD steps on `part` of each batch: each step's gradients, by parameter name, and the parameters.
    (Not Adam: it scales the rounding noise of a gradient that is 0 in exact arithmetic, such as the keys' bias's,
    up to a full step.)"""
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    grads = []
    for step in range(STEPS):
        opt.zero_grad()
        idx, target = batch(step)
        model(idx[part], target[part]).backward()
        grads.append({n.replace(".module.", "."): getattr(p.grad, "full_tensor", lambda g=p.grad: g)()
                      for n, p in model.named_parameters()})
        opt.step()
    params = {n.replace(".module.", "."): getattr(p, "full_tensor", lambda q=p: q)().detach()
              for n, p in model.named_parameters()}
    return grads, params


def worker(rank, port, out):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    join(rank, port)
    mesh = init_device_mesh("cpu", (2,))
    model = make_model(onnxtrain_blocks=True)
    for block in model.model.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    result = train(model, slice(rank * 2, rank * 2 + 2))
    if rank == 0:
        torch.save(result, out)
    del model
    finish()


def test_fsdp2_matches_single_process(tmp_path):
    out = str(tmp_path / "fsdp.pt")
    spawn(worker, out)
    grads, params = torch.load(out)
    want_grads, want_params = train(make_model(onnxtrain_blocks=False), slice(0, 4))
    for step in range(STEPS):
        assert grads[step].keys() == want_grads[step].keys()
        for n, g in want_grads[step].items():
            torch.testing.assert_close(grads[step][n], g, rtol=1e-4, atol=1e-6, msg=f"step {step}: {n}")
    for n, p in want_params.items():
        torch.testing.assert_close(params[n], p, rtol=1e-4, atol=1e-6, msg=n)
