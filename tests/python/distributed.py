"""Two processes meeting on a loopback port (gloo), for the distributed tests."""

import gc
import os
import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def join(rank, port):
    """Joins the two-process group on the CPU, one thread each."""
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2)


def finish():
    """Tears the process group down once the caller has dropped its distributed module: at exit, Gloo work
    still referenced by a live one can abort the process ("terminate called without an active exception", one
    run in ~20 here)."""
    dist.barrier()
    gc.collect()
    dist.destroy_process_group()


def spawn(fn, *args):
    """Runs fn(rank, port, *args) in two processes that meet on a free loopback port."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(fn, args=(port, *args), nprocs=2, join=True)
