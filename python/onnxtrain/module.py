"""onnxtrain.Module: a torch.nn.Module that runs the module it wraps as an ONNX graph in onnxtrain.

    model = onnxtrain.Module(model)   # the rest of the training loop is unchanged

Parameters, buffers, state_dict, optimizers and gradient accumulation stay plain PyTorch: the weights are
fed to the graph on every call and gradients come back through torch.autograd into `p.grad`.
"""

import collections
import inspect
import logging
import os
import time

import torch

from onnxtrain import _capture_cache, _capture_lock, memory_log, optim
from onnxtrain import _onnxtrain as C
from onnxtrain._autograd import Apply, Release, as_input
from onnxtrain._export import OPSET, export
from onnxtrain._schema import flatten, key, unflatten
from onnxtrain.options import Options

logger = logging.getLogger("onnxtrain")


def applied_in_backward(module, wrt):
    """The names among `wrt` whose parameters an onnxtrain.optim optimizer updates inside backward (a parameter
    the graph reads under two names is left to step())."""
    held = dict(module.named_parameters(remove_duplicate=False))
    names = [n for n in wrt if optim.owner_of(held[n]) is not None]
    if not names:
        return frozenset()
    if torch.distributed.is_available() and torch.distributed.is_initialized() and \
            torch.distributed.get_world_size() > 1:
        raise RuntimeError("onnxtrain.optim(in_backward=True) updates each parameter from this rank's gradient, "
                           "but distributed training must average gradients across ranks first: use "
                           "in_backward=False")
    count = collections.Counter(id(held[n]) for n in names)
    return frozenset(n for n in names if count[id(held[n])] == 1)


def held_state(module):
    """The module's buffers and parameters by name, as it holds them now (a tied one under each of its names)."""
    return {**dict(module.named_buffers(remove_duplicate=False)),
            **dict(module.named_parameters(remove_duplicate=False))}


class _Runner:
    """One exported graph and its session, for one input schema and mode."""

    def __init__(self, module, exported, training, options, inputs_requiring_grad, dims, device, applied=frozenset()):
        self.rebuild_args = (module, exported, training, options, inputs_requiring_grad, dims, device)
        self.applied = applied  # the parameters an optimizer updates inside backward (onnxtrain.optim)
        self.module = module
        self.exported = exported
        self.training = training
        self.output_names = exported.output_names
        self.feed_names = exported.input_names + exported.state_names
        # An argument the graph never reads is not among the exported model's inputs: it is not fed.
        self.model_inputs = {i.name for i in exported.model.graph.input}
        # Sizes the graph was exported for (torch.export specializes a dim the module requires a size of, and
        # sizes 0 and 1): a call with other sizes has another graph.
        positions = {n: k for k, n in enumerate(exported.input_names)}
        self.fixed_sizes = [(positions[i.name], d, dim.dim_value) for i in exported.model.graph.input
                            if i.name in positions for d, dim in enumerate(i.type.tensor_type.shape.dim)
                            if dim.HasField("dim_value")]
        inputs_requiring_grad = [n for n in inputs_requiring_grad if n in self.model_inputs]
        params = dict(module.named_parameters(remove_duplicate=False))
        model_bytes = exported.model.SerializeToString()
        stem = os.path.join(options.save_onnx, f"{type(module).__name__}_{'train' if training else 'eval'}")
        if options.save_onnx:
            os.makedirs(options.save_onnx, exist_ok=True)
            with open(stem + "_exported.onnx", "wb") as f:
                f.write(model_bytes)
        if training:
            self.wrt = [n for n in exported.state_names if n in params and params[n].requires_grad]
            self.session = C.Session.for_training(model_bytes, self.wrt + inputs_requiring_grad, "",
                                                  options.memory_opt_config, options.memory_budget, dims,
                                                  options.memory_opt_level, keep_cache=options.keep_cache,
                                                  release_cache_after=options.release_cache_after,
                                                  applied_in_backward=set(applied), device=str(device))
            self.dims = dims
            # Recorded at the first training step, by rank 0 only (as the memory lines) when distributed.
            self.timeline_path = options.memory_timeline if memory_log._rank() == 0 else ""
            if options.memory_opt_config or options.memory_budget or options.memory_opt_level:
                logger.warning("onnxtrain memory optimizer (%s), sizes for the first batch:\n%s", type(module).__name__,
                               self.session.memory_report(dims))
            else:
                logger.info("onnxtrain recompute candidates (%s), sizes for the first batch:\n%s",
                            type(module).__name__, self.session.memory_report(dims))
            self.grad_outputs = set(self.session.output_grad_names)
            self.optional_grad_outputs = set(self.session.optional_output_grad_names)
            # the parameters and buffers whose gradients backward makes, in the order it makes them final
            state = set(exported.state_names)
            self.gradient_order = [n for n in self.session.gradient_order if n in state]
        else:
            self.session = C.Session.from_bytes(model_bytes, device=str(device))
            self.grad_outputs = set()
            self.optional_grad_outputs = set()
        if options.save_onnx:  # what onnxtrain runs: the training graph, after its passes
            self.session.save(stem + "_optimized.onnx")

    def accepts(self, tensors):
        return all(tensors[k].shape[d] == size for k, d, size in self.fixed_sizes)

    def feeds(self, tensors):
        """`tensors`: the inputs, then the state (parameters and buffers); the state the module holds now when
        only the inputs are given."""
        if len(tensors) < len(self.feed_names):
            held = held_state(self.module)
            tensors = [*tensors, *(held[n] for n in self.exported.state_names)]
        return {n: as_input(t) for n, t in zip(self.feed_names, tensors) if n in self.model_inputs}

    def forward(self, tensors):
        names = self.exported.input_names
        self.last_dims = {f"{n}_dim{i}": int(d) for n, t in zip(names, tensors) for i, d in enumerate(t.shape)}
        # Random ops draw from PyTorch's generator, so torch.manual_seed makes runs reproducible.
        seed = int(torch.randint(0, 2**62, (1,)).item())
        if self.timeline_path:
            self.session.start_memory_recording()
        outs, state = self.session.run_forward(self.feeds(tensors), seed)
        self.last_stash_bytes = state.stash_bytes
        self.update_buffers(outs, tensors)
        return outs, state

    def backward(self, state, output_grads, on_gradient=None):
        # The parameters and buffers as the module holds them now: FSDP2 frees them after forward and gathers
        # them again before backward, elsewhere; the stash reads them where they are.
        held = held_state(self.module)
        refeeds = {n: as_input(held[n]) for n in self.exported.state_names if n in self.model_inputs}
        if self.applied:
            handed = on_gradient

            def on_gradient(name, gradient):
                if name in self.applied:  # (its last use: the session frees it when this returns)
                    optim.apply_in_backward(held[name], torch.from_dlpack(gradient))
                elif handed is not None:
                    handed(name, gradient)

        result = self.session.run_backward(state, output_grads, refeeds, on_gradient)
        if self.timeline_path:
            from onnxtrain import timeline

            path, self.timeline_path = self.timeline_path, ""
            timeline.save(self.session.stop_memory_recording(self.last_dims), path)
            logger.warning("onnxtrain: memory timeline of the first training step of %s: %s",
                           type(self.module).__name__, path)
        return result

    def run(self, tensors):
        outs = self.session.run(self.feeds(tensors))
        return tuple(torch.from_dlpack(outs[n]) for n in self.output_names)

    def update_buffers(self, outs, tensors):
        if not self.exported.buffer_updates:
            return
        held = dict(zip(self.feed_names, tensors))
        with torch.no_grad():
            for out, buffer in self.exported.buffer_updates.items():
                held[buffer].copy_(torch.from_dlpack(outs[out]))
            for name, b in self.module.named_buffers():
                if name.endswith("num_batches_tracked"):
                    b.add_(1)


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
        with _capture_lock.calling():  # (waits for a capture under way in another thread)
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
            rebuilt = _Runner(*runner.rebuild_args, applied=applied)
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
            if self._options.early_gradients:
                handoff, token, released = Release.chain(held, [n for n in runner.gradient_order
                                                                if n not in runner.applied])
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
        # A module may say which dims of its tensor arguments vary (the dynamo backend's graphs do); all by default.
        dynamic_dims = getattr(self.module, "dynamic_dims", None)
        exported, how = self._exported(full, tensors, names, dynamic_dims, device)
        t1 = time.perf_counter()
        needs = [n for n, t in zip(names, tensors) if t.requires_grad and t.is_floating_point()]
        dims = {f"{n}_dim{i}": int(d) for n, t in zip(names, tensors) for i, d in enumerate(t.shape)}
        runner = _Runner(self.module, exported, training, self._options, needs, dims, device)
        t2 = time.perf_counter()
        logger.info("onnxtrain: %s: %s in %.2f s (%d nodes, by %s), session built in %.2f s",
                    type(self.module).__name__, how, t1 - t0, len(exported.model.graph.node), exported.exporter,
                    t2 - t1)
        return runner

    def _exported(self, full, tensors, names, dynamic_dims, device):
        """The graph of this call, from the capture cache or captured (and then stored in it), and which."""
        folder = _capture_cache.folder_of(self._options.capture_cache)
        k = folder and _capture_cache.key(self.module, key(full), tensors, self.module.training, dynamic_dims,
                                          self._options.exporter, OPSET, device.type)
        exported = k and _capture_cache.load(folder, k)
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
            _capture_cache.store(folder, k, exported)
        return exported, "exported"

