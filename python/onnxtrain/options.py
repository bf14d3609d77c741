"""Options of onnxtrain.Module, each overridable by an environment variable (the environment wins)."""

import dataclasses
import logging
import os


@dataclasses.dataclass
class Options:
    log_level: str = "WARNING"   # ONNXTRAIN_LOG_LEVEL: INFO logs each first-step phase and its time
    save_onnx: str = ""          # ONNXTRAIN_SAVE_ONNX: a folder to save the exported graphs in
    fallback: str = "raise"      # ONNXTRAIN_FALLBACK: "raise", or "torch" to run the module itself, warning once
    # ONNXTRAIN_EXPORTER: how a module is captured: "auto" (torch.export, or PyTorch's TorchScript-based exporter
    # with a warning naming why where torch.export cannot capture it), "torch.export" (its graph translated by
    # onnxtrain, or by PyTorch's ONNX exporter where onnxtrain does not translate it), "torch.onnx" (torch.export,
    # always through PyTorch's ONNX exporter) or "torchscript"
    exporter: str = "auto"
    # ONNXTRAIN_CAPTURE_PROCESS=0: capture in this process rather than in a child forked for it (the child keeps
    # the exporters' imports and caches, about 90 MiB, out of the training process; a capture runs here anyway
    # while other threads run, under torch.distributed, or where there is no fork)
    capture_process: bool = True
    # ONNXTRAIN_CAPTURE_CACHE: the folder of the capture cache, where captured graphs are kept so that the next run
    # of the same code on the same model loads them instead of capturing again; "0" disables it. By default
    # $XDG_CACHE_HOME/onnxtrain/captures (~/.cache/onnxtrain/captures); onnxtrain.clear_capture_cache() empties it
    capture_cache: str = ""
    # ONNXTRAIN_DYNAMIC: which dims of the tensor arguments the graph takes as symbols: "all" (the default: one
    # capture serves every size), "batch" (dim 0 of each; the others fixed at the first call's sizes) or "none"
    # (every dim fixed). A call with other fixed sizes captures again, as torch.compile(dynamic=False) compiles
    # again. torch.export's reasoning about symbolic sizes has its cost: a small SwinV2, whose image sizes decide
    # its windows' padding, captures in about 1 s with them fixed and 50 s with them symbolic
    dynamic: str = "all"
    # ONNXTRAIN_MEMORY_OPT_CONFIG (alias ORTMODULE_MEMORY_OPT_CONFIG): recompute plans, "ClusterId:Strategy:Count,..."
    # inline or a path to a JSON array of such strings
    memory_opt_config: str = ""
    # ONNXTRAIN_MEMORY_OPT_LEVEL (alias ORTMODULE_MEMORY_OPT_LEVEL), as ONNX Runtime's: 0 the config only (and, at
    # every level, the plans that cost at most a flop per byte they save: docs/memory.md); 1
    # layer-wise checkpointing (inside each transformer layer, every plain plan: the layer recomputed in backward
    # from its input); 2 level 1 with compromised plans too (the narrower input of an up-cast stashed, not its output)
    memory_opt_level: int = 0
    # ONNXTRAIN_MEMORY_BUDGET: a fraction of the stash to keep at most (0.3), or a size for the whole step's
    # predicted peak ("6GiB": parameters, gradients, stash, transient buffers; PyTorch's optimizer state is not
    # counted), for the first batch's sizes; the memory optimizer recomputes the cheapest plans that meet it
    memory_budget: str = ""
    print_memory_stats: bool = False  # ONNXTRAIN_PRINT_MEMORY_STATS=1: log the memory of each training step's phases
    # ONNXTRAIN_MEMORY_TIMELINE: a PNG path; the first training step's allocations and frees are recorded and
    # drawn there (the data goes to the same path with .json)
    memory_timeline: str = ""
    # ONNXTRAIN_KEEP_CACHE=1: the allocator keeps its free blocks between steps
    keep_cache: bool = False
    # ONNXTRAIN_RELEASE_CACHE_AFTER: otherwise, the seconds its free blocks may idle after a backward before they
    # go back to the system (0, the default: at the end of each backward, so that none idle beside PyTorch's
    # optimizer). A step that starts sooner reuses them: faster where the system is slow to give freed memory back
    # (a virtual machine's host), at the cost of the optimizer's temporaries on the process's peak
    release_cache_after: float = 0.0
    # ONNXTRAIN_EARLY_GRADIENTS (1, 0, auto): 1 hands each parameter's gradient to autograd (p.grad, DDP's hooks)
    # as soon as it is final, backward running in a thread of its own; 0 hands them all over when backward is done,
    # run in the caller's thread. None (auto, the default): early where something reads them early, that is under
    # torch.distributed (DDP's and FSDP2's hooks) or where a parameter has a hook of its own; else at the end, which
    # is faster where nothing overlaps with backward (a second thread's OpenMP team has both teams' threads give up
    # their cores between parallel regions: a bf16 135M Llama's step took 10-15% longer)
    early_gradients: bool | None = None

    def resolved(self):
        """These options with the environment's overrides applied and checked."""
        o = dataclasses.replace(self)
        o.log_level = os.environ.get("ONNXTRAIN_LOG_LEVEL", o.log_level).upper()
        o.save_onnx = os.environ.get("ONNXTRAIN_SAVE_ONNX", o.save_onnx)
        o.fallback = os.environ.get("ONNXTRAIN_FALLBACK", o.fallback).lower()
        o.exporter = os.environ.get("ONNXTRAIN_EXPORTER", o.exporter).lower()
        o.capture_cache = os.environ.get("ONNXTRAIN_CAPTURE_CACHE", o.capture_cache)
        o.dynamic = os.environ.get("ONNXTRAIN_DYNAMIC", o.dynamic).lower()
        if o.dynamic not in ("all", "batch", "none"):
            raise ValueError(f"onnxtrain: ONNXTRAIN_DYNAMIC / Options.dynamic is '{o.dynamic}'; use all, batch or "
                             "none")
        o.memory_opt_config = os.environ.get("ONNXTRAIN_MEMORY_OPT_CONFIG",
                                             os.environ.get("ORTMODULE_MEMORY_OPT_CONFIG", o.memory_opt_config))
        level = os.environ.get("ONNXTRAIN_MEMORY_OPT_LEVEL",
                               os.environ.get("ORTMODULE_MEMORY_OPT_LEVEL", o.memory_opt_level))
        if str(level) not in ("0", "1", "2"):
            raise ValueError(f"onnxtrain: memory optimizer level '{level}' is not 0, 1 or 2")
        o.memory_opt_level = int(level)
        o.memory_timeline = os.environ.get("ONNXTRAIN_MEMORY_TIMELINE", o.memory_timeline)
        folder = os.path.dirname(os.path.abspath(o.memory_timeline)) if o.memory_timeline else ""
        if folder and not os.path.isdir(folder):
            raise ValueError(f"onnxtrain: ONNXTRAIN_MEMORY_TIMELINE / Options.memory_timeline is "
                             f"'{o.memory_timeline}', but the folder {folder} does not exist")
        flag = {True: "1", False: "0"}
        o.capture_process = os.environ.get("ONNXTRAIN_CAPTURE_PROCESS", flag[o.capture_process]) == "1"
        o.keep_cache = os.environ.get("ONNXTRAIN_KEEP_CACHE", flag[o.keep_cache]) == "1"
        after = os.environ.get("ONNXTRAIN_RELEASE_CACHE_AFTER", o.release_cache_after)
        try:
            o.release_cache_after = float(after)
        except ValueError:
            o.release_cache_after = -1.0
        if not o.release_cache_after >= 0:
            raise ValueError(f"onnxtrain: ONNXTRAIN_RELEASE_CACHE_AFTER / Options.release_cache_after is '{after}'; "
                             "use a number of seconds >= 0")
        early = os.environ.get("ONNXTRAIN_EARLY_GRADIENTS", {None: "auto", **flag}.get(o.early_gradients))
        if early not in ("0", "1", "auto"):
            raise ValueError(f"onnxtrain: ONNXTRAIN_EARLY_GRADIENTS / Options.early_gradients is '{early}'; use 1, 0 "
                             "or auto (True, False or None)")
        o.early_gradients = {"1": True, "0": False, "auto": None}[early]
        o.print_memory_stats = os.environ.get("ONNXTRAIN_PRINT_MEMORY_STATS", flag[o.print_memory_stats]) == "1"
        budget = os.environ.get("ONNXTRAIN_MEMORY_BUDGET", o.memory_budget)
        o.memory_budget = "" if budget in (0, "0", "") else str(budget)
        from onnxtrain._onnxtrain import check_memory_budget

        check_memory_budget(o.memory_budget)  # a ConfigError quoting it
        if o.fallback not in ("raise", "torch"):
            raise ValueError(f"onnxtrain: ONNXTRAIN_FALLBACK / Options.fallback is '{o.fallback}'; "
                             "use 'raise' or 'torch'")
        from onnxtrain._capture.export import EXPORTERS

        if o.exporter not in EXPORTERS:
            raise ValueError(f"onnxtrain: ONNXTRAIN_EXPORTER / Options.exporter is '{o.exporter}'; use one of "
                             f"{', '.join(EXPORTERS)}")
        if o.log_level not in logging.getLevelNamesMapping():
            raise ValueError(f"onnxtrain: log level '{o.log_level}' is not one of DEBUG, INFO, WARNING, ERROR")
        return o
