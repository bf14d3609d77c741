"""onnxtrain.Module: a torch.nn.Module that runs the module it wraps as an ONNX graph in onnxtrain.

    model = onnxtrain.Module(model)   # the rest of the training loop is unchanged

Parameters, buffers, state_dict, optimizers and gradient accumulation stay plain PyTorch: the weights are
fed to the graph on every call and gradients come back through torch.autograd into `p.grad`.
"""

import inspect
import logging
import time

import torch

from onnxtrain import _onnxtrain as C
from onnxtrain import memory_log
from onnxtrain._autograd import Apply, Release, early_gradients
from onnxtrain._capture import capture_cache, capture_lock
from onnxtrain._capture.export import OPSET, export
from onnxtrain._capture.input_schema import flatten, key, unflatten
from onnxtrain._runner import Runner, applied_in_backward, held_state
from onnxtrain.options import Options

logger = logging.getLogger("onnxtrain")


class Module(torch.nn.Module):
    def __init__(self, module, options=None):
        super().__init__()
        if not isinstance(module, torch.nn.Module):
            raise TypeError(f"onnxtrain.Module wraps a torch.nn.Module, not {type(module).__name__}")
        self.module = module
        self._options = (options or Options()).resolved()
        self._runners = {}  # cache key -> the runners built for it (sizes they were exported for differ)
        self._built = []
        self._warned = False
        self.export_count = 0
        logger.setLevel(self._options.log_level)
        if self._options.print_memory_stats:
            if logger.getEffectiveLevel() > logging.INFO:
                logger.setLevel(logging.INFO)
            self.memory_stats_printer = memory_log.subscribe(self)
        if logger.getEffectiveLevel() < logging.WARNING and not logger.hasHandlers():
            # (Python's last-resort handler shows warnings only: the asked-for lines would go nowhere)
            handler = logging.StreamHandler()
            handler.setFormatter(logging.Formatter("%(message)s"))
            logger.addHandler(handler)
        try:
            self._signature = inspect.signature(module.forward)
        except (TypeError, ValueError):
            self._signature = None

    # Parameters, buffers and state are the wrapped module's own, under its own names.
    def runners(self):
        """The graphs built so far, each with its session, in the order they were built."""
        return list(self._built)

    def named_parameters(self, prefix="", recurse=True, remove_duplicate=True):
        return self.module.named_parameters(prefix, recurse, remove_duplicate)

    def named_buffers(self, prefix="", recurse=True, remove_duplicate=True):
        return self.module.named_buffers(prefix, recurse, remove_duplicate)

    def state_dict(self, *args, **kwargs):
        return self.module.state_dict(*args, **kwargs)

    def load_state_dict(self, state_dict, strict=True, assign=False):
        return self.module.load_state_dict(state_dict, strict, assign)

    def memory_report(self, dims=None, json=False):
        """The memory optimizer's report of the training graph built last: every recompute cluster with its
        frequency, status, bytes saved (symbolic, and for `dims` such as {"input_ids_dim0": 8}; by default the
        last batch's), flops and the config entry that enables it; then the step's predicted peak without and with
        the plans."""
        runners = [r for r in self.runners() if r.training]
        if not runners:
            raise RuntimeError("onnxtrain: no training graph yet; the report comes after the first training forward")
        return runners[-1].session.memory_report(dims or getattr(runners[-1], "last_dims", runners[-1].dims), json)

    def memory_timeline(self, path):
        """Draws the predicted memory timeline of the training graph at the last batch's sizes to `path` (PNG;
        the data goes to the same path with .json): bytes over the execution order by category, the
        forward/backward boundary, the predicted peak. Options(memory_timeline=PATH) records a real step instead."""
        from onnxtrain import timeline

        runners = [r for r in self.runners() if r.training and hasattr(r, "last_dims")]
        if not runners:
            raise RuntimeError("onnxtrain: no training step yet; the timeline comes after one")
        return timeline.save(runners[-1].session.memory_timeline(runners[-1].last_dims), path)

    def last_stash_bytes(self):
        """Bytes the last training forward kept for its backward."""
        runners = [r for r in self.runners() if r.training and hasattr(r, "last_stash_bytes")]
        return runners[-1].last_stash_bytes if runners else 0

    def _input_names(self, args, kwargs):
        names = []
        if self._signature is not None:
            params = [p.name for p in self._signature.parameters.values()
                      if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
            names = params[: len(args)]
        names += [f"input_{i}" for i in range(len(names), len(args))]
        return names

    def __call__(self, *args, **kwargs):
        with capture_lock.calling():  # (waits for a capture under way in another thread)
            return super().__call__(*args, **kwargs)

    def forward(self, *args, **kwargs):
        try:
            return self._forward(args, kwargs)
        except C.Error as e:
            if self._options.fallback != "torch":
                raise type(e)(f"onnxtrain.Module({type(self.module).__name__}): {e}. Set ONNXTRAIN_FALLBACK=torch "
                              "to run this module in PyTorch instead, or rewrite the part named above.") from e
            if not self._warned:
                logger.warning("onnxtrain: running %s in PyTorch (fallback): %s", type(self.module).__name__, e)
                self._warned = True
            return self.module(*args, **kwargs)

    def _runner(self, args, kwargs):
        """The runner of this call's graph (built at its first call), the call's tensors, and whether it trains."""
        training = self.module.training and torch.is_grad_enabled()
        tensors, names = [], []
        positional = self._input_names(args, kwargs)
        schema = (tuple, [flatten(a, n, tensors, names) for a, n in zip(args, positional)])
        kw = (dict, {k: flatten(v, k, tensors, names) for k, v in kwargs.items()})
        full = (tuple, [schema, kw])
        device = self._device(tensors, names)
        # Autocast's casts are part of the exported graph: each autocast state has its own.
        autocast = (torch.is_autocast_enabled(device.type), torch.get_autocast_dtype(device.type))
        cache_key = (key(full), training, self.module.training, autocast, device)
        runners = self._runners.setdefault(cache_key, [])
        runner = next((r for r in runners if r.accepts(tensors)), None)
        if runner is None:
            runner = self._build(full, tensors, names, training, device)
            runners.append(runner)
            self._built.append(runner)
        applied = applied_in_backward(self.module, runner.wrt) if training else frozenset()
        if training and applied != runner.applied:  # (an in_backward optimizer made or dropped since it was built)
            rebuilt = Runner(*runner.rebuild_args, applied=applied)
            runners[runners.index(runner)] = rebuilt
            self._built[self._built.index(runner)] = rebuilt
            runner = rebuilt
        return runner, tensors, training

    def _device(self, tensors, names):
        """The device the call runs on: its tensors' and the module's parameters' and buffers' (one for all)."""
        named = [*zip(names, tensors), *held_state(self.module).items()]
        if not named:
            return torch.device("cpu")
        first_name, first = named[0]
        for name, t in named:
            if t.device != first.device:
                raise C.InputError(f"onnxtrain.Module({type(self.module).__name__}): '{name}' is on {t.device} but "
                                   f"'{first_name}' on {first.device}: one device runs the whole graph")
        if first.device.type not in ("cpu", "cuda"):
            raise C.UnsupportedError(f"onnxtrain runs on the CPU and on CUDA GPUs, not on {first.device}")
        return first.device

    def _forward(self, args, kwargs):
        runner, tensors, training = self._runner(args, kwargs)
        # Parameters and buffers are read at every call, never kept: FSDP2 swaps sharded and unsharded ones, and
        # load_state_dict(assign=True) or to_empty replace them.
        held = held_state(self.module)
        state = [held[n] for n in runner.exported.state_names]
        if training:
            handoff, token, released = None, None, set()
            names = [n for n in runner.gradient_order if n not in runner.applied]
            if early_gradients(self._options.early_gradients, [held[n] for n in names]):
                handoff, token, released = Release.chain(held, names)
            if runner.applied and token is None:  # (what autograd reaches backward through, when nothing else is)
                token = torch.zeros((), requires_grad=True)
            state = [held[n].detach() if n in released or n in runner.applied else held[n]
                     for n in runner.exported.state_names]
            outs = Apply.apply(runner, handoff, token, *tensors, *state)
        else:
            outs = runner.run([*tensors, *state])
        return unflatten(runner.exported.out_schema, list(outs))

    def _build(self, full, tensors, names, training, device):
        t0 = time.perf_counter()
        # A module may say which dims of its tensor arguments vary (the dynamo backend's graphs do); else the
        # options do (all by default).
        dynamic_dims = getattr(self.module, "dynamic_dims", None)
        if dynamic_dims is None and self._options.dynamic != "all":
            dynamic_dims = [[0] if self._options.dynamic == "batch" and t.dim() else [] for t in tensors]
        exported, how = self._exported(full, tensors, names, dynamic_dims, device)
        t1 = time.perf_counter()
        needs = [n for n, t in zip(names, tensors) if t.requires_grad and t.is_floating_point()]
        dims = {f"{n}_dim{i}": int(d) for n, t in zip(names, tensors) for i, d in enumerate(t.shape)}
        runner = Runner(self.module, exported, training, self._options, needs, dims, device)
        t2 = time.perf_counter()
        logger.info("onnxtrain: %s: %s in %.2f s (%d nodes, by %s), session built in %.2f s",
                    type(self.module).__name__, how, t1 - t0, len(exported.model.graph.node), exported.exporter,
                    t2 - t1)
        return runner

    def _exported(self, full, tensors, names, dynamic_dims, device):
        """The graph of this call, from the capture cache or captured (and then stored in it), and which."""
        folder = capture_cache.folder_of(self._options.capture_cache)
        k = folder and capture_cache.key(self.module, key(full), tensors, self.module.training, dynamic_dims,
                                          self._options.exporter, OPSET, device.type)
        exported = k and capture_cache.load(folder, k)
        if exported:
            if exported.exporter != "torch.export" and self._options.exporter == "auto":
                logger.warning("onnxtrain: %s: captured by PyTorch's TorchScript-based exporter, torch.export "
                               "could not (the capture cache's entry; ONNXTRAIN_LOG_LEVEL=INFO and "
                               "ONNXTRAIN_CAPTURE_CACHE=0 show why)", type(self.module).__name__)
            return exported, "loaded from the capture cache"
        exported = export(self.module, full, tensors, names, self.module.training, dynamic_dims,
                          self._options.exporter, self._options.capture_process)
        self.export_count += 1
        if k:
            capture_cache.store(folder, k, exported)
        return exported, "exported"

