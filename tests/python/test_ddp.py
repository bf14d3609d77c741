"""DistributedDataParallel around onnxtrain.Module: two processes (gloo, loopback), each with half the batch,
end with the gradients single-process training computes on the whole batch."""

import os
import socket
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import onnxtrain

sys.path.insert(0, os.path.dirname(__file__))
from models import GPT, WithLoss  # noqa: E402


def make_model():
    torch.manual_seed(0)
    return WithLoss(GPT(vocab=65, dim=32, heads=4, layers=2, block=16)).train()


def batch():
    g = torch.Generator().manual_seed(1)
    idx = torch.randint(0, 65, (4, 16), generator=g)
    return idx, torch.roll(idx, -1, 1)


def worker(rank, port, out):
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    model = torch.nn.parallel.DistributedDataParallel(onnxtrain.Module(make_model()))
    idx, target = batch()
    half = slice(rank * 2, rank * 2 + 2)
    model(idx[half], target[half]).backward()
    if rank == 0:
        torch.save({n: p.grad for n, p in model.module.named_parameters()}, out)
    dist.barrier()
    dist.destroy_process_group()


def test_ddp_matches_single_process(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = str(tmp_path / "grads.pt")
    mp.spawn(worker, args=(port, out), nprocs=2, join=True)
    grads = torch.load(out)
    single = make_model()
    single(*batch()).backward()
    for n, p in single.named_parameters():
        assert torch.allclose(grads[n], p.grad, rtol=1e-4, atol=1e-6), n
