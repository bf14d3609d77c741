"""onnxtrain.optim: PyTorch's AdamW and SGD as torch.optim.Optimizers (param groups, LR schedulers, state_dict,
PyTorch's numerics), each parameter's update one fused pass in C++: on every core for a parameter on the CPU, one
kernel on PyTorch's current stream for a parameter on a GPU (the same roundings as on the CPU).

With in_backward=True, the parameters an onnxtrain.Module owns are updated inside its backward, each as soon as
its gradient is final and nothing in backward reads the parameter any more, and the gradient is freed at once: no
step holds all the gradients, p.grad stays None, and step() and zero_grad() have nothing to do for them (step()
still updates any other parameter of the optimizer that has a .grad, such as one used outside the Module).

    opt = onnxtrain.optim.AdamW(model.parameters(), lr=1e-4, in_backward=True)
    loss = model(x); loss.backward()   # the update happened here
    opt.step(); opt.zero_grad()        # (kept in the loop, harmless)

What needs every gradient before any update cannot work that way: gradients accumulated over micro-batches (a
second backward before step() raises once the loop has called step()), clipping by global norm (PyTorch's
clip_grad_norm_ sees no gradient and returns 0), and distributed data parallelism (gradients must be averaged
across ranks first: raises). Use in_backward=False for those.
"""

import weakref

import torch
from torch.utils.weak import WeakIdKeyDictionary

from onnxtrain import _onnxtrain as C

_owners = WeakIdKeyDictionary()  # parameter -> a weak reference to the in_backward optimizer that updates it


def owner_of(p):
    """The optimizer that updates `p` inside onnxtrain's backward, or None."""
    owner = _owners.get(p)
    return owner and owner()


def apply_in_backward(p, gradient, stream):
    """Called by onnxtrain.Module's backward with a parameter's final gradient (its last use), and the queue the
    backward runs on (an integer handle: a CUDA stream; 0 on the CPU), where the update goes too."""
    owner_of(p)._apply_in_backward(p, gradient, stream)


class _Fused(torch.optim.Optimizer):
    def __init__(self, params, defaults, in_backward):
        self.in_backward = bool(in_backward)
        self._group_of, self._groups_seen = {}, None
        self._stepped, self._since_step = False, set()
        super().__init__(params, defaults)

    def add_param_group(self, param_group):
        super().add_param_group(param_group)
        self._groups_seen = None
        for p in self.param_groups[-1]["params"]:
            if p.device.type not in ("cpu", "cuda"):
                raise ValueError(f"{type(self).__name__}: a parameter is on {p.device}; onnxtrain.optim updates "
                                 "parameters on the CPU and on CUDA GPUs")
            if self.in_backward:
                other = owner_of(p)
                if other is not None and other is not self:
                    raise ValueError(f"{type(self).__name__}(in_backward=True): a parameter is already updated in "
                                     f"backward by another optimizer ({type(other).__name__})")
                _owners[p] = weakref.ref(self)

    def _group(self, p):
        if self._groups_seen is not self.param_groups:  # (load_state_dict makes new groups)
            self._group_of = {id(q): g for g in self.param_groups for q in g["params"]}
            self._groups_seen = self.param_groups
        return self._group_of[id(p)]

    def _apply_in_backward(self, p, gradient, stream):
        if self._stepped and id(p) in self._since_step:
            raise RuntimeError(f"onnxtrain.optim.{type(self).__name__}(in_backward=True): a second backward before "
                               "step(): each backward applies its update, so gradients cannot accumulate over "
                               "micro-batches; use in_backward=False to accumulate, or one larger batch")
        self._since_step.add(id(p))
        with torch.no_grad():
            self._update(self._group(p), [p], [gradient], [stream])

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        if self.in_backward:
            self._stepped, self._since_step = True, set()
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if params:
                self._update(group, params, [p.grad for p in params])
        return loss


def _streams(xs):
    """Each parameter's queue: PyTorch's current stream of its GPU (0 on the CPU)."""
    of = {}
    for x in xs:
        if x.device.type == "cuda" and x.device not in of:
            of[x.device] = torch.cuda.current_stream(x.device).cuda_stream
    return [of.get(x.device, 0) for x in xs]


def _checked(p, g):
    if g.is_sparse:
        raise RuntimeError("onnxtrain.optim does not support sparse gradients")
    if p.is_complex():
        raise RuntimeError("onnxtrain.optim does not support complex parameters")
    if not p.is_contiguous():
        raise RuntimeError("onnxtrain.optim updates contiguous parameters only; this one has strides "
                           f"{p.stride()} for size {tuple(p.shape)}")
    return p.detach(), g.detach().contiguous()


class AdamW(_Fused):
    """torch.optim.AdamW's algorithm and defaults (amsgrad and maximize included; lr a float)."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, amsgrad=False, *,
                 maximize=False, in_backward=False):
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 <= eps:
            raise ValueError(f"Invalid epsilon value: {eps}")
        if not 0.0 <= betas[0] < 1.0 or not 0.0 <= betas[1] < 1.0:
            raise ValueError(f"Invalid beta parameters: {betas}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad, maximize=maximize)
        super().__init__(params, defaults, in_backward)

    def _update(self, group, params, grads, streams=None):
        xs, gs, ms, vs, tops, steps = [], [], [], [], [], []
        for p, g in zip(params, grads):
            x, g = _checked(p, g)
            state = self.state[p]
            if not state:
                state["step"] = torch.tensor(0.0)
                state["exp_avg"] = torch.zeros_like(x)
                state["exp_avg_sq"] = torch.zeros_like(x)
                if group["amsgrad"]:
                    state["max_exp_avg_sq"] = torch.zeros_like(x)
            state["step"] += 1
            xs.append(x), gs.append(g), ms.append(state["exp_avg"]), vs.append(state["exp_avg_sq"])
            tops.append(state.get("max_exp_avg_sq") if group["amsgrad"] else None)
            steps.append(int(state["step"].item()))
        beta1, beta2 = group["betas"]
        hyper = C.AdamWHyper(lr=float(group["lr"]), beta1=beta1, beta2=beta2, eps=group["eps"],
                             weight_decay=group["weight_decay"], amsgrad=group["amsgrad"],
                             maximize=group["maximize"])
        C.adamw_update(xs, gs, ms, vs, tops, steps, hyper, streams or _streams(xs))


class SGD(_Fused):
    """torch.optim.SGD's algorithm and defaults (momentum, dampening, nesterov, weight decay, maximize)."""

    def __init__(self, params, lr=1e-3, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False, *,
                 maximize=False, in_backward=False):
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if momentum < 0.0:
            raise ValueError(f"Invalid momentum value: {momentum}")
        if weight_decay < 0.0:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        defaults = dict(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay, nesterov=nesterov,
                        maximize=maximize)
        super().__init__(params, defaults, in_backward)

    def _update(self, group, params, grads, streams=None):
        xs, gs, bufs, first = [], [], [], []
        momentum = group["momentum"]
        for p, g in zip(params, grads):
            x, g = _checked(p, g)
            state = self.state[p]
            buf = state.get("momentum_buffer")
            first.append(momentum != 0 and buf is None)
            if momentum != 0 and buf is None:
                buf = state["momentum_buffer"] = torch.empty_like(x)
            xs.append(x), gs.append(g), bufs.append(buf if momentum != 0 else None)
        hyper = C.SgdHyper(lr=float(group["lr"]), weight_decay=group["weight_decay"], momentum=momentum,
                           dampening=group["dampening"], nesterov=group["nesterov"], maximize=group["maximize"])
        C.sgd_update(xs, gs, bufs, first, hyper, streams or _streams(xs))
