"""Mixture-of-experts layers of transformers (an experts class that takes an experts_implementation, as Mixtral's,
Qwen-MoE's and OLMoE's do) captured dense: every expert computes every token, its output weighted by the token's
routing weight for it, zero where the router did not pick it. The graph then has the same shapes whatever the
routing (its memory prediction holds for every routing, the worst included), for E/top_k times the experts' work
of a sparse dispatch, and gives the same loss and gradients (an expert a token skips adds 0 and gets 0).
transformers' own ONNX export takes "batched_mm" instead, which copies the picked expert's weights for every
token: at real sizes that copy is far larger than the dense work. A model set to "batched_mm" keeps it."""

import contextlib
import logging

import torch

from onnxtrain import _onnxtrain as C

logger = logging.getLogger("onnxtrain")

DENSE = "onnxtrain_dense"
_STATIC = (DENSE, "batched_mm")  # implementations whose shapes do not depend on the routing


def _expert_product(x, weight, bias, transposed):
    """x (T, in) through each expert's weight (E, out, in), or (E, in, out) when `transposed`: (E, T, out)."""
    y = torch.matmul(x, weight if transposed else weight.transpose(1, 2))
    return y if bias is None else y + bias.unsqueeze(1)


def dense_experts_forward(self, hidden_states, top_k_index, top_k_weights):
    if getattr(self, "_is_expert_parallel", False):
        raise C.UnsupportedError("onnxtrain: experts split across devices (expert parallelism)")
    routing = torch.zeros(hidden_states.size(0), self.num_experts, dtype=top_k_weights.dtype,
                          device=top_k_weights.device).scatter(1, top_k_index, top_k_weights)  # (T, E)
    prefix = "gate_up" if self.has_gate else "up"
    h = _expert_product(hidden_states, getattr(self, f"{prefix}_proj"),
                        getattr(self, f"{prefix}_proj_bias", None) if self.has_bias else None, self.is_transposed)
    h = self._apply_gate(h) if self.has_gate else self.act_fn(h)  # (E, T, intermediate)
    out = _expert_product(h, self.down_proj, self.down_proj_bias if self.has_bias else None, self.is_transposed)
    if self.has_post_expert_norm:
        out = self.post_expert_norm(out)
    return (out * routing.t().unsqueeze(-1)).sum(0).to(hidden_states.dtype)  # (T, hidden)


def _models(module):
    """The outermost transformers models in `module` that hold experts of the kind an experts_implementation
    dispatches (transformers' use_experts_implementation sets their has_gate and is_concatenated)."""
    found, covered = [], set()
    for m in module.modules():
        if id(m) in covered or not getattr(type(m), "set_experts_implementation", None):
            continue
        inner = list(m.modules())
        if any(hasattr(x, "has_gate") and hasattr(x, "is_concatenated") for x in inner):
            found.append(m)
            covered.update(id(x) for x in inner)
    return found


def register():
    """Makes DENSE an experts implementation transformers knows."""
    from transformers.integrations.moe import ALL_EXPERTS_FUNCTIONS

    ALL_EXPERTS_FUNCTIONS.register(DENSE, dense_experts_forward)


def use_dense_experts(model):
    """Sets a transformers model's mixture-of-experts layers to run dense (see this module), as onnxtrain.Module's
    capture does by itself for the length of the capture: for torch.compile(model, backend="onnxtrain"), whose
    graphs TorchDynamo traces before onnxtrain sees them. A model without such layers is left as it is."""
    for m in _models(model):
        register()
        m.set_experts_implementation(DENSE)
    return model


@contextlib.contextmanager
def dense(module):
    """While it lasts, `module`'s mixture-of-experts layers run dense (but those set to a static implementation)."""
    changed = []
    for model in _models(module):
        current = model.get_experts_implementation()
        if current.get("") in _STATIC:
            continue
        register()
        model.set_experts_implementation(DENSE)
        changed.append((model, current))
        logger.warning("onnxtrain: %s: its mixture-of-experts layers are captured dense (every expert on every token, "
                       "weighted by its routing weight): the same loss and gradients, the experts' work times "
                       "experts / top_k; the predicted memory holds for every routing", type(model).__name__)
    try:
        yield
    finally:
        for model, implementation in changed:
            model.set_experts_implementation(implementation)
