"""The benchmark of record: real-size models trained by onnxtrain beside PyTorch's eager and torch.compile, fp32
and bf16 autocast, full and LoRA, each configuration in its own process (configurations alternate over rounds,
figures are medians).

Models (transformers, random weights, loss from labels=input_ids):
  llama  SmolLM2-135M's shape (vocab 49152, d576, 30 layers, 9 heads, 3 KV heads, tied head), batch 2x256
  gpt2   GPT-2 124M (GPT2Config's defaults, dropout 0.1), batch 2x512

Configurations: eager, eager-bf16, compile, compile-bf16 (inductor), onnxtrain-l0/-l1/-l2 (memory optimizer
levels), onnxtrain-bf16 (level 0 under autocast), lora-eager and lora-onnxtrain (peft, r=16 on the attention's
query and value projections): PyTorch's AdamW with fused=True; onnxtrain-adamw (level 0, onnxtrain.optim.AdamW)
and onnxtrain-inbw (level 0, onnxtrain.optim.AdamW with in_backward=True: each update applied in backward),
onnxtrain-inbw-0.1 (and a budget keeping a tenth of the stash: the plans cheapest per byte, the tied head's dW
formed at the end of backward instead of in forward among them), onnxtrain-l1-inbw and onnxtrain-l1-inbw-0.1 (the
same at level 1: the budget's plans beyond the level's). Other combinations follow the names' grammar (parse()):
onnxtrain-l1-0.3-bf16 is level 1, a budget of 0.3 of the stash, under bf16 autocast.

Printed per configuration: s/step (median of the measured steps), the ratio to its reference (eager for fp32,
eager-bf16 for bf16, lora-eager for LoRA), the first step (capture or compilation included), peak RSS growth
(the process's peak over the measured steps above its resident size once the model and optimizer exist; the
peak is reset after two warm-up steps) and its ratio, and for onnxtrain the step's peak in its allocator (above
what was allocated before the step) as predicted before the first step and as measured. onnxtrain's configurations
share a capture cache of their own: it is emptied before each onnxtrain-l0 run, whose first step is the cold one
(capture included); the levels after it load its graph (a level does not change the capture): their first step is
a warm cache's.

    python bench/real_size.py [--models llama,gpt2] [--rounds 1] [--steps 3] [--only eager,onnxtrain-l0]
"""

import argparse
import gc
import json
import os
import statistics
import shutil
import subprocess
import sys
import tempfile
import time

from process_memory import reset_peak_rss, rss_mib

CONFIGS = ["eager", "eager-bf16", "compile", "compile-bf16", "onnxtrain-l0", "onnxtrain-l1", "onnxtrain-l2",
           "onnxtrain-bf16", "onnxtrain-adamw", "onnxtrain-inbw", "onnxtrain-inbw-0.1", "onnxtrain-l1-inbw",
           "onnxtrain-l1-inbw-0.1", "lora-eager", "lora-onnxtrain"]
SHAPES = {"llama": (2, 256), "gpt2": (2, 512)}
VOCAB = {"llama": 49152, "gpt2": 50257}
LORA_TARGETS = {"llama": ["q_proj", "v_proj"], "gpt2": ["c_attn"]}
REFERENCE = {"eager-bf16": "eager-bf16", "compile-bf16": "eager-bf16", "onnxtrain-bf16": "eager-bf16",
             "lora-eager": "lora-eager", "lora-onnxtrain": "lora-eager"}


def make_model(name, tiny=False):
    """The model of record, with random weights; `tiny`: two narrow layers of its kind (a quick check of a script)."""
    import transformers as T

    if name == "llama":
        size = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2) if tiny else dict(hidden_size=576, intermediate_size=1536,
                                                             num_hidden_layers=30, num_attention_heads=9,
                                                             num_key_value_heads=3)
        config = T.LlamaConfig(vocab_size=49152, tie_word_embeddings=True, max_position_embeddings=2048,
                               use_cache=False, **size)
        return T.LlamaForCausalLM(config)
    size = dict(n_embd=64, n_layer=2, n_head=4) if tiny else {}
    return T.GPT2LMHeadModel(T.GPT2Config(use_cache=False, **size))


def parse(config):
    """A configuration's name as its parts, dash-separated after its system (eager, compile, onnxtrain, lora-eager,
    lora-onnxtrain): l<k> a memory optimizer level, a number or a size a budget (onnxtrain.Options.memory_budget),
    inbw onnxtrain.optim.AdamW applying updates in backward, adamw the same applying them in step(), bf16 autocast."""
    system = next(s for s in ("lora-onnxtrain", "lora-eager", "onnxtrain", "compile", "eager") if config.startswith(s))
    parts = {"system": system, "level": 0, "budget": "", "inbw": False, "adamw": False, "bf16": False}
    for token in config[len(system):].split("-")[1:]:
        if token in ("inbw", "adamw", "bf16"):
            parts[token] = True
        elif token[0] == "l" and token[1:].isdigit():
            parts["level"] = int(token[1:])
        else:
            parts["budget"] = token
    return parts


def build(name, config, device="cpu", tiny=False, save_onnx=""):
    """The model and its optimizer for a configuration; `save_onnx`: a folder onnxtrain saves its graphs in."""
    import torch

    import onnxtrain

    torch.manual_seed(0)
    model = make_model(name, tiny).train().to(device)
    parts = parse(config)
    if parts["system"].startswith("lora"):
        import peft

        model = peft.get_peft_model(model, peft.LoraConfig(r=16, lora_alpha=32, target_modules=LORA_TARGETS[name],
                                                           lora_dropout=0.0))
    if parts["system"] == "compile":
        model = torch.compile(model)
    elif parts["system"].endswith("onnxtrain"):
        options = onnxtrain.Options(memory_opt_level=parts["level"], memory_budget=parts["budget"],
                                    save_onnx=save_onnx)
        model = onnxtrain.Module(model, options)
    params = [p for p in model.parameters() if p.requires_grad]
    if parts["adamw"] or parts["inbw"]:
        return model, onnxtrain.optim.AdamW(params, lr=1e-4, in_backward=parts["inbw"])
    return model, torch.optim.AdamW(params, lr=1e-4, fused=True)


def train_step(model, opt, ids, device, bf16):
    """One step as the benchmarks take it: gradients freed first (the allocator's level before a step holds none),
    forward under bf16 autocast where asked, backward, the optimizer's step; the loss."""
    import torch

    opt.zero_grad(set_to_none=True)
    with torch.autocast(device, torch.bfloat16, enabled=bf16):
        loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    opt.step()
    return loss


def measure(name, config, steps):
    """One configuration in this process: its figures as a dict."""
    import torch

    import onnxtrain

    model, opt = build(name, config)
    batch, seq = SHAPES[name]
    ids = torch.randint(0, VOCAB[name], (batch, seq))
    bf16 = parse(config)["bf16"]
    gc.collect()
    base = rss_mib("VmRSS")

    def step():
        return train_step(model, opt, ids, "cpu", bf16).item()

    t = time.perf_counter()
    step()  # capture or compilation
    first = time.perf_counter() - t
    step()  # the optimizer's state
    gc.collect()
    reset_peak_rss()
    times, measured = [], 0
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        onnxtrain.reset_peak_stats()
        before = onnxtrain.allocator_stats()["allocated"]
        t = time.perf_counter()
        loss = step()
        times.append(time.perf_counter() - t)
        measured = max(measured, onnxtrain.allocator_stats()["peak_allocated"] - before)
    out = {"s": statistics.median(times), "rss": rss_mib("VmHWM") - base, "first": first, "loss": loss}
    if isinstance(model, onnxtrain.Module):
        runner = [r for r in model.runners() if r.training][-1]
        out["predicted"] = runner.session.predict_memory(runner.last_dims)["peak"] / 2**20
        out["measured"] = measured / 2**20
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="llama,gpt2")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--only", default="", help="comma-separated configurations (default: all)")
    p.add_argument("--measure", nargs=2, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.measure:
        print(json.dumps(measure(*args.measure, args.steps)))
        return
    configs = args.only.split(",") if args.only else CONFIGS
    threads = os.environ.get("OMP_NUM_THREADS", str(os.cpu_count()))
    cache = tempfile.mkdtemp(prefix="onnxtrain-bench-captures-")
    env = {**os.environ, "ONNXTRAIN_CAPTURE_CACHE": cache}
    for name in args.models.split(","):
        res = {c: [] for c in configs}
        for _ in range(args.rounds):
            for c in configs:
                if c == "onnxtrain-l0":
                    shutil.rmtree(cache, ignore_errors=True)
                out = subprocess.run([sys.executable, __file__, "--measure", name, c, "--steps", str(args.steps)],
                                     capture_output=True, text=True, env=env)
                if out.returncode != 0:
                    print(f"{name} {c} failed:\n{out.stderr[-3000:]}", flush=True)
                    continue
                res[c].append(json.loads(out.stdout.strip().splitlines()[-1]))
        med = {c: {k: statistics.median(r[k] for r in runs) for k in runs[0]} for c, runs in res.items() if runs}
        batch, seq = SHAPES[name]
        print(f"\n{name}, batch {batch}x{seq}, {threads} threads, AdamW(fused=True); each configuration in its own "
              f"process; medians of {args.rounds} run(s) of {args.steps} steps")
        print(f"{'':22}{'s/step':>8}{'/ref':>7}{'first s':>9}{'RSS +MiB':>10}{'/ref':>7}{'predicted':>11}"
              f"{'measured':>10}{'loss':>9}")
        for c, m in med.items():
            ref = med.get(REFERENCE.get(c, "eager"))
            t_rel = f"{m['s'] / ref['s']:7.2f}" if ref else " " * 7
            m_rel = f"{m['rss'] / ref['rss']:7.2f}" if ref else " " * 7
            pred = f"{m['predicted']:11.1f}{m['measured']:10.1f}" if "predicted" in m else " " * 21
            print(f"{c:22}{m['s']:8.2f}{t_rel}{m['first']:9.1f}{m['rss']:10.0f}{m_rel}{pred}{m['loss']:9.3f}",
                  flush=True)
    shutil.rmtree(cache, ignore_errors=True)


if __name__ == "__main__":
    main()
