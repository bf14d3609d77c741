"""DistributedDataParallel over onnxtrain.Module with and without early gradients (Options.early_gradients: each
parameter's gradient handed to autograd, and so to DDP's all-reduce, as soon as backward makes it final, against all
of them at the end of backward). Two processes on this machine (gloo over loopback, one thread each), a GPT (dim 384,
6 layers, 6 heads, 4x128 per process, vocab 8192, AdamW); the two settings alternate, each run in fresh processes.
Printed: the median step time over the measured steps, and the peak RSS growth of rank 0 over its state after
building the model and optimizer (the peak reset after two warm-up steps).

    python bench/ddp_bench.py [--rounds 3] [--steps 6]"""

import argparse
import os
import socket
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..", "examples")]
from peers import reset_peak_rss, rss_mib  # noqa: E402


def worker(rank, port, early, steps, out):
    import onnxtrain
    from gpt import GPT
    from train_gpt import CharLM

    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    torch.manual_seed(0)
    module = onnxtrain.Module(CharLM(GPT(vocab=8192, dim=384, heads=6, layers=6, block=128, dropout=0.1)).train(),
                              onnxtrain.Options(early_gradients=early))
    model = torch.nn.parallel.DistributedDataParallel(module)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    idx = torch.randint(0, 8192, (4, 128))
    target = torch.roll(idx, -1, 1)
    base = rss_mib("VmRSS")
    times = []
    for step in range(steps + 2):
        if step == 2:
            reset_peak_rss()
        dist.barrier()
        t0 = time.perf_counter()
        loss = model(idx, target)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t0)
    if rank == 0:
        with open(out, "w") as f:
            f.write(f"{statistics.median(times[2:]) * 1e3} {rss_mib('VmHWM') - base}")
    dist.barrier()
    del model, module
    dist.destroy_process_group()


def run(early, steps):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"ddp_bench_{os.getpid()}.txt")
    mp.spawn(worker, args=(port, early, steps, out), nprocs=2, join=True)
    with open(out) as f:
        ms, rss = map(float, f.read().split())
    os.remove(out)
    return ms, rss


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=6)
    args = parser.parse_args()
    results = {True: [], False: []}
    for _ in range(args.rounds):
        for early in (True, False):
            results[early].append(run(early, args.steps))
    print(f"DDP, 2 processes x 1 thread (gloo, loopback), GPT dim 384, 6 layers, 4x128 per process, vocab 8192; "
          f"medians of {args.rounds} runs of {args.steps} steps")
    print(f"{'':24}{'ms/step':>9}{'peak RSS +MiB':>15}")
    figures = {}
    for early, label in ((False, "gradients at the end"), (True, "early gradients")):
        ms = statistics.median(r[0] for r in results[early])
        rss = statistics.median(r[1] for r in results[early])
        figures[early] = (ms, rss)
        print(f"{label:24}{ms:9.1f}{rss:15.1f}")
    print(f"early / at the end: step time {figures[True][0] / figures[False][0]:.2f}, "
          f"peak RSS growth {figures[True][1] / figures[False][1]:.2f}")


if __name__ == "__main__":
    main()
