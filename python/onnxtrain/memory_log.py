"""Memory statistics in the format users of ONNX Runtime Training know, for onnxtrain and plain PyTorch alike:

    rank-0 step 1 memory (MiB) | phase: pre_forward | allocated: 5331 | max allocated: 9039 | cached: 9382 | ...

`log_memory_usage` logs one line for a phase; `subscribe(module)` logs the four phases of every training step
of any module (pre/post forward from module hooks, pre backward when the first output gradient arrives, post
backward when every parameter's gradient is done).
"""

import logging
import os
import weakref

import torch

from onnxtrain import _onnxtrain as C

PHASES = ("pre_forward", "post_forward", "pre_backward", "post_backward")
_MIB = 1024 * 1024
logger = logging.getLogger("onnxtrain")


def _rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def memory_stats(device="cpu"):
    """onnxtrain's allocator statistics of `device` ('cpu', 'cuda:0', a torch.device; bytes) and the process's
    resident memory."""
    stats = dict(C.allocator_stats(str(device)))
    stats["process_rss"] = _rss()
    return stats


def _tensor_bytes(tensors):
    seen = {}
    for t in tensors:
        if t is not None:
            seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
    return sum(seen.values())


def _rank():
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank()
    return 0


def format_fields(module=None, stats=None):
    """The fields of a memory line, in whole MiB."""
    params = list(module.parameters()) if module is not None else []
    s = stats if stats is not None else memory_stats(params[0].device if params else "cpu")
    fields = [("allocated", s["allocated"]), ("max allocated", s["peak_allocated"]), ("cached", s["cached"]),
              ("max cached", s["peak_cached"]), ("inactive", s["inactive"]), ("max inactive", s["peak_inactive"]),
              ("param", _tensor_bytes(params)), ("grad", _tensor_bytes([p.grad for p in params])),
              ("buffer", _tensor_bytes(list(module.buffers())) if module is not None else 0)]
    text = " | ".join(f"{name}: {value // _MIB}" for name, value in fields)
    plain = not hasattr(module, "memory_report") if module is not None else s["num_allocs"] == 0
    if plain:  # a plain PyTorch module (or nothing through onnxtrain's allocator yet): its memory is the process's
        text += (f" | process rss: {s['process_rss'] // _MIB} (the allocator fields are onnxtrain's; PyTorch's CPU "
                 "allocator has no statistics)")
    return text


def format_line(phase, step, rank, module=None, stats=None):
    return f"rank-{rank} step {step} memory (MiB) | phase: {phase} | {format_fields(module, stats)}"


def log_memory_usage(phase, module=None, step_info="", logger=None):
    """Logs one line of memory statistics for `phase` (any text), e.g. at points of your own training loop."""
    head = f"rank-{_rank()} {step_info}".strip()
    (logger or logging.getLogger("onnxtrain")).info("%s memory (MiB) | phase: %s | %s", head, phase,
                                                    format_fields(module))


class _Identity(torch.autograd.Function):
    @staticmethod
    def forward(ctx, printer, *tensors):
        ctx.printer = printer
        return tensors if len(tensors) > 1 else tensors[0]

    @staticmethod
    def backward(ctx, *grads):
        ctx.printer.phase("pre_backward")
        return (None, *grads)


class MemoryStatsPrinter:
    """Logs the four phases of training steps of `module`: steps 0 to 9, then powers of two (or every step, or the
    steps given)."""

    def __init__(self, module, every_step=False, all_ranks=False, logger=None, steps=None):
        # (a weak reference: the parameters' gradient hook holds the printer from C++, where Python's collector
        # cannot see the cycle back to the module, which a strong one would keep alive for good)
        self.module = weakref.ref(module)
        self.every_step, self.all_ranks = every_step, all_ranks
        self.logger = logger or logging.getLogger("onnxtrain")
        self.steps = None if steps is None else set(steps)
        self.step, self.last = 0, None

    def sampled(self):
        if self.steps is not None:
            return self.step in self.steps
        return self.every_step or self.step < 10 or (self.step & (self.step - 1)) == 0

    def phase(self, name):
        expected = PHASES[(PHASES.index(self.last) + 1) % 4] if self.last else PHASES[0]
        if name != expected:
            raise RuntimeError(f"onnxtrain memory statistics: phase '{name}' in step {self.step} came after "
                               f"'{self.last}'; the order is {', '.join(PHASES)}")
        self.last = name
        if self.sampled() and (self.all_ranks or _rank() == 0):
            self.logger.info(format_line(name, self.step, _rank(), self.module()))
        if name == "post_backward":
            self.step += 1


def subscribe(module, every_step=False, all_ranks=False, logger=None, steps=None):
    """Adds the four phases' memory lines to the training steps of `module` (plain PyTorch or onnxtrain): steps 0 to
    9 then powers of two, every step, or the given step numbers (`steps`)."""
    printer = MemoryStatsPrinter(module, every_step, all_ranks, logger, steps)
    params = [p for p in module.parameters() if p.requires_grad]

    def pre(mod, args):
        if mod.training and torch.is_grad_enabled():
            printer.phase("pre_forward")

    def post(mod, args, out):
        if not (mod.training and torch.is_grad_enabled()):
            return out
        printer.phase("post_forward")
        tensors = [out] if isinstance(out, torch.Tensor) else list(out) if isinstance(out, (tuple, list)) else None
        if not tensors or not all(isinstance(t, torch.Tensor) and t.requires_grad for t in tensors):
            raise TypeError("onnxtrain memory statistics: the module must return tensors that require grad")
        wrapped = _Identity.apply(printer, *tensors)
        return wrapped if isinstance(out, torch.Tensor) else type(out)(wrapped)

    module.register_forward_pre_hook(pre)
    module.register_forward_hook(post)
    torch.autograd.graph.register_multi_grad_hook(params, lambda grads: printer.phase("post_backward"))
    return printer
