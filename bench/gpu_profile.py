"""Where an onnxtrain training step's time goes on one CUDA device: bench/gpu.py's model and configuration, each of
the graph's op types with its milliseconds and calls a step (the session's profile, the kernels launched one at a
time so that a node's time is its kernels': CUDA_LAUNCH_BLOCKING=1), then the device's kernels by time
(torch.profiler), which name what an op type's time was spent in, then the training graph's Casts by what they read
and what reads them (autocast's, for a fusion to take them into their neighbours). --host: the host's time instead,
each op type's milliseconds and microseconds a call with the kernels queued as in training (not waited for): where
the host spends a step's time launching it, which the device waits on where it outruns the host.

    python bench/gpu_profile.py [--model gpt2|llama] [--config onnxtrain-bf16] [--batch 16] [--seq 1024]
                                [--steps 2] [--top 30] [--tiny] [--host]

--tiny runs a two-layer model anywhere (the CPU too: its op types' times are the CPU's, not a figure of record).
"""

import argparse
import collections
import glob
import os
import sys
import tempfile

if "--host" not in sys.argv:  # (before CUDA starts: torch is imported below)
    os.environ.setdefault("CUDA_LAUNCH_BLOCKING", "1")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from real_size import VOCAB, build, parse, train_step  # noqa: E402


def casts(folder):
    """The training graph's Cast nodes (saved in `folder`) as counts by (the op that writes their input, through a
    Reshape where one, the dtype they cast to, the ops that read their output), most first."""
    import onnx

    graphs = sorted(glob.glob(os.path.join(folder, "*_train_optimized.onnx")))
    if not graphs:
        return []
    g = onnx.load(graphs[-1], load_external_data=False).graph
    node_of = {o: n for n in g.node for o in n.output}

    def writer(value):
        n = node_of.get(value)
        if n is None:
            return "input"
        return writer(n.input[0]) + ">Reshape" if n.op_type == "Reshape" else n.op_type

    readers = collections.defaultdict(list)
    for n in g.node:
        for i in n.input:
            readers[i].append(n.op_type)
    count = collections.Counter()
    for n in g.node:
        if n.op_type == "Cast":
            to = next(a.i for a in n.attribute if a.name == "to")
            count[(writer(n.input[0]), onnx.TensorProto.DataType.Name(to).lower(),
                   ",".join(sorted(set(readers[n.output[0]]))) or "output")] += 1
    return count.most_common()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="gpt2", choices=["gpt2", "llama"])
    p.add_argument("--config", default="onnxtrain-bf16")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--top", type=int, default=30)
    p.add_argument("--tiny", action="store_true")
    p.add_argument("--host", action="store_true", help="the host's time per op type, the kernels queued")
    args = p.parse_args()
    if not args.config.startswith("onnxtrain"):
        p.error("--config: an onnxtrain configuration (bench/real_size.py's grammar)")
    import torch
    from torch.profiler import ProfilerActivity, profile

    device = "cuda" if torch.cuda.is_available() else "cpu"
    saved = tempfile.mkdtemp(prefix="onnxtrain-profile-")
    model, opt = build(args.model, args.config, device, args.tiny, saved)
    ids = torch.randint(0, VOCAB[args.model], (args.batch, args.seq), device=device)
    bf16 = parse(args.config)["bf16"]

    # The capture, the optimizer's state, then a step whose allocator still reserves blocks fresh from the system
    # (on the CPU, GPT-2 bf16's third step faulted 245 MiB in: its tied embedding's gradient Cast took about 230 ms,
    # 10 ms later on).
    for _ in range(3):
        train_step(model, opt, ids, device, bf16)
    runners = model.runners()
    for r in runners:
        r.session.set_profiling(True)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with profile(activities=activities) as prof:
        for _ in range(args.steps):
            train_step(model, opt, ids, device, bf16)
        if device == "cuda":
            torch.cuda.synchronize()
    ops = {}
    for r in runners:
        for op, (ms, calls) in r.session.profile().items():
            total = ops.setdefault(op, [0.0, 0])
            total[0] += ms / args.steps
            total[1] += calls / args.steps
    how = "the host's time, kernels queued" if args.host else "kernels one at a time" if device == "cuda" else "the CPU"
    nodes = sum(v[1] for v in ops.values())
    print(f"{args.model} {args.config}, batch {args.batch}x{args.seq} on {device}: op types a step ({how}), "
          f"{sum(v[0] for v in ops.values()):.1f} ms over {nodes:.0f} nodes")
    print(f"{'op type':32}{'ms':>10}{'calls':>8}{'us a call':>11}")
    for op, (ms, calls) in sorted(ops.items(), key=lambda kv: -kv[1][0])[:args.top]:
        print(f"{op:32}{ms:10.2f}{calls:8.0f}{1e3 * ms / max(calls, 1):11.1f}")
    key = "self_cuda_time_total" if device == "cuda" else "self_cpu_time_total"
    print(f"\nthe {'device' if device == 'cuda' else 'CPU'}'s work by time over {args.steps} steps (torch.profiler)")
    print(prof.key_averages().table(sort_by=key, row_limit=args.top, max_name_column_width=90))
    print("\nthe training graph's Casts: count, the op that writes the input, to, the ops that read the output")
    for (source, to, readers), n in casts(saved):
        print(f"{n:6}  {source:36}{to:10}{readers}")


if __name__ == "__main__":
    main()
