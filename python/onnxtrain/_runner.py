"""One captured graph of an onnxtrain.Module and its session: what a call feeds it (inputs, parameters, buffers),
its forward and backward runs, the gradients handed to PyTorch or applied in backward by onnxtrain.optim, and
the buffers the graph updates (BatchNorm's running statistics) written back."""

import collections
import logging
import os

import torch

from onnxtrain import _onnxtrain as C
from onnxtrain import memory_log, optim
from onnxtrain._autograd import as_input

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


class Runner:
    """One exported graph and its session, for one input schema and mode."""

    def __init__(self, module, exported, training, options, inputs_requiring_grad, dims, device, applied=frozenset()):
        self.rebuild_args = (module, exported, training, options, inputs_requiring_grad, dims, device)
        self.device = torch.device(device)
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
            session_options = C.SessionOptions(
                device=str(device), keep_cache=options.keep_cache, release_cache_after=options.release_cache_after,
                memory_level=options.memory_opt_level, memory_config=options.memory_opt_config,
                memory_budget=options.memory_budget, memory_dims=dims, applied_in_backward=set(applied))
            buffers = {n for n, _ in module.named_buffers()}
            self.session = C.Session.for_training(
                model_bytes, self.wrt + inputs_requiring_grad, "", session_options,
                running_statistics={n for n in exported.state_names if n in buffers}, unbiased_running_var=True)
            self.buffer_updates = self.session.buffer_updates  # {output: the buffer it overwrites after forward}
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
            self.session = C.Session.from_bytes(model_bytes, C.SessionOptions(device=str(device)))
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
        outs, state = self.session.run_forward(self.feeds(tensors), seed, stream=self.stream())
        self.last_stash_bytes = state.stash_bytes
        self.update_buffers(outs, tensors)
        return outs, state

    def stream(self):
        """PyTorch's current stream on the runner's CUDA device as an integer handle (0 on the CPU): onnxtrain's
        work goes on it, ordered with PyTorch's without waiting. Autograd makes a backward's current stream its
        forward's."""
        return torch.cuda.current_stream(self.device).cuda_stream if self.device.type == "cuda" else 0

    def backward(self, state, output_grads, on_gradient=None, stream=None):
        """`stream`: as stream() (the default) where this thread is not autograd's (early gradients' thread)."""
        # The parameters and buffers as the module holds them now: FSDP2 frees them after forward and gathers
        # them again before backward, elsewhere; the stash reads them where they are.
        held = held_state(self.module)
        refeeds = {n: as_input(held[n]) for n in self.exported.state_names if n in self.model_inputs}
        queue = self.stream() if stream is None else stream
        if self.applied:
            handed = on_gradient

            def on_gradient(name, gradient):
                if name in self.applied:  # (its last use: the session frees it when this returns; on its queue)
                    optim.apply_in_backward(held[name], torch.from_dlpack(gradient), queue)
                elif handed is not None:
                    handed(name, gradient)

        result = self.session.run_backward(state, output_grads, refeeds, on_gradient, stream=queue)
        if self.timeline_path:
            from onnxtrain import timeline

            path, self.timeline_path = self.timeline_path, ""
            timeline.save(self.session.stop_memory_recording(self.last_dims), path)
            logger.warning("onnxtrain: memory timeline of the first training step of %s: %s",
                           type(self.module).__name__, path)
        return result

    def run(self, tensors):
        outs = self.session.run(self.feeds(tensors), stream=self.stream())
        return tuple(torch.from_dlpack(outs[n]) for n in self.output_names)

    def update_buffers(self, outs, tensors):
        if not self.buffer_updates:
            return
        held = dict(zip(self.feed_names, tensors))
        with torch.no_grad():
            for out, buffer in self.buffer_updates.items():
                held[buffer].copy_(torch.from_dlpack(outs[out]))
            for name, b in self.module.named_buffers():
                if name.endswith("num_batches_tracked"):
                    b.add_(1)
