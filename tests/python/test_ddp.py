"""DistributedDataParallel around onnxtrain.Module: two processes (gloo, loopback), each with half the batch,
end with the gradients single-process training computes on the whole batch."""

import os
import sys

import torch

import onnxtrain

sys.path.insert(0, os.path.dirname(__file__))
from distributed import finish, join, spawn  # noqa: E402
from models import GPT, WithLoss  # noqa: E402


def make_model():
    torch.manual_seed(0)
    return WithLoss(GPT(vocab=65, dim=32, heads=4, layers=2, block=16)).train()


def batch():
    g = torch.Generator().manual_seed(1)
    idx = torch.randint(0, 65, (4, 16), generator=g)
    return idx, torch.roll(idx, -1, 1)


def worker(rank, port, out):
    join(rank, port)
    model = torch.nn.parallel.DistributedDataParallel(onnxtrain.Module(make_model()))
    idx, target = batch()
    half = slice(rank * 2, rank * 2 + 2)
    model(idx[half], target[half]).backward()
    if rank == 0:
        torch.save({n: p.grad for n, p in model.module.named_parameters()}, out)
    del model
    finish()


def test_ddp_matches_single_process(tmp_path):
    out = str(tmp_path / "grads.pt")
    spawn(worker, out)
    grads = torch.load(out)
    single = make_model()
    single(*batch()).backward()
    for n, p in single.named_parameters():
        assert torch.allclose(grads[n], p.grad, rtol=1e-4, atol=1e-6), n


def stats_worker(rank, port, folder):
    import logging

    os.environ["ONNXTRAIN_PRINT_MEMORY_STATS"] = "1"
    os.environ["ONNXTRAIN_MEMORY_TIMELINE"] = os.path.join(folder, "step.png")
    join(rank, port)
    log = logging.getLogger("onnxtrain")
    log.addHandler(logging.FileHandler(os.path.join(folder, f"rank{rank}.log")))
    model = torch.nn.parallel.DistributedDataParallel(onnxtrain.Module(make_model()))
    idx, target = batch()
    model(idx, target).backward()
    eager = make_model()  # a plain PyTorch module, every rank asked to log
    onnxtrain.subscribe_memory_stats(eager, all_ranks=True)
    eager(idx, target).backward()
    del model
    finish()


def test_memory_stats_come_from_rank_zero_under_ddp(tmp_path):
    spawn(stats_worker, str(tmp_path))
    logs = [(tmp_path / f"rank{r}.log").read_text().splitlines() for r in (0, 1)]
    assert "memory timeline of the first training step" in "\n".join(logs[0])  # rank 0 records the timeline
    assert "memory timeline" not in "\n".join(logs[1])
    assert (tmp_path / "step.png").exists()
    lines = [[line for line in log if " memory (MiB) | phase: " in line] for log in logs]
    # rank 0: the onnxtrain module's four phases and the subscriber's four; rank 1: only the subscriber's.
    assert [line.split(" memory")[0] for line in lines[0]] == ["rank-0 step 0"] * 8, logs[0]
    assert [line.split(" memory")[0] for line in lines[1]] == ["rank-1 step 0"] * 4, logs[1]
    assert [line.split("phase: ")[1].split(" |")[0] for line in lines[1]] == [
        "pre_forward", "post_forward", "pre_backward", "post_backward"]
