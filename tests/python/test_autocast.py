"""Low precision. bfloat16 autocast: onnxtrain.Module under torch.autocast("cpu", torch.bfloat16) against eager
under the same autocast (dropout 0): the loss, every parameter gradient (cosine similarity), 20 AdamW steps;
parameters and their gradients stay float32; each autocast state has its own graph; the step's peak equals its
prediction. float16 as storage and through casts."""

import copy
import warnings

import numpy as np
import pytest
import torch
from models import BERT, CNN, GPT, WithLoss

import onnxtrain

transformers = pytest.importorskip("transformers")


def gpt():
    return WithLoss(GPT(vocab=64, dim=64, heads=4, layers=2, block=16)), (torch.randint(0, 64, (4, 16)),) * 2


def bert():
    ids = torch.randint(0, 100, (4, 16))
    mask = torch.ones(4, 16)
    mask[0, -3:] = 0
    return WithLoss(BERT()), (ids, mask, ids)


def cnn():
    return WithLoss(CNN()), (torch.randn(4, 3, 16, 16), torch.randint(0, 10, (4,)))


def gpt2():
    c = transformers.GPT2Config(vocab_size=100, n_positions=32, n_embd=64, n_layer=2, n_head=4, resid_pdrop=0.0,
                                embd_pdrop=0.0, attn_pdrop=0.0, use_cache=False)
    ids = torch.randint(0, 100, (2, 16))
    return transformers.GPT2LMHeadModel(c), dict(input_ids=ids, labels=ids)


def llama():
    c = transformers.LlamaConfig(vocab_size=100, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                 num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
                                 use_cache=False)
    ids = torch.randint(0, 100, (2, 16))
    return transformers.LlamaForCausalLM(c), dict(input_ids=ids, labels=ids)


def call(model, data):
    out = model(**data) if isinstance(data, dict) else model(*data)
    return out.loss if hasattr(out, "loss") else out


def cosine(a, b):
    return float(torch.nn.functional.cosine_similarity(a.flatten().double(), b.flatten().double(), dim=0))


@pytest.mark.parametrize("make", [gpt, bert, cnn, gpt2, llama])
def test_bf16_autocast_matches_eager_under_the_same_autocast(make):
    warnings.simplefilter("ignore")
    torch.manual_seed(0)
    eager, data = make()
    eager.train()
    ours = copy.deepcopy(eager)
    wrapped = onnxtrain.Module(ours)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got, want = call(wrapped, data), call(eager, data)
    assert got.dtype == want.dtype
    assert got.item() == pytest.approx(want.item(), rel=2e-2)
    got.backward()
    want.backward()
    # Gradients that are zero but for rounding (a convolution's bias under training BatchNorm) have no direction.
    scale = max(float(q.grad.abs().max()) for q in eager.parameters() if q.grad is not None)
    compared = 0
    for (name, p), (_, q) in zip(ours.named_parameters(), eager.named_parameters()):
        if q.grad is None:
            continue
        assert p.grad.dtype == torch.float32, name
        if float(q.grad.abs().max()) > 1e-3 * scale:
            assert cosine(p.grad, q.grad) >= 0.999, name
            compared += 1
    assert compared >= 4
    opts = [torch.optim.AdamW(m.parameters(), lr=1e-3) for m in (eager, wrapped)]
    losses = [[], []]
    for _ in range(20):
        for k, model in enumerate((eager, wrapped)):
            opts[k].zero_grad()
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = call(model, data)
            loss.backward()
            opts[k].step()
            losses[k].append(loss.item())
    np.testing.assert_allclose(losses[1][-1], losses[0][-1], rtol=2e-2)
    assert wrapped.export_count == 1


def test_each_autocast_state_has_its_own_graph():
    torch.manual_seed(0)
    eager, data = gpt()
    wrapped = onnxtrain.Module(copy.deepcopy(eager))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low = call(wrapped, data)
    full = call(wrapped, data)
    assert wrapped.export_count == 2
    assert full.item() == pytest.approx(call(eager, data).item(), rel=1e-5)
    assert low.item() != full.item()


@pytest.mark.parametrize("level", [0, 2])
def test_bf16_step_peak_equals_the_prediction(level):
    """The allocator's peak over a bf16 training step equals the plan's prediction (level 2 stashes the bf16
    inputs of up-casts where that is cheaper)."""
    torch.manual_seed(0)
    model, data = gpt()
    wrapped = onnxtrain.Module(model, onnxtrain.Options(memory_opt_level=level))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        call(wrapped, data).backward()
    runner = next(r for r in wrapped.runners() if r.training)
    session, dims = runner.session, runner.dims
    predicted = session.predict_memory(dims)
    feeds = runner.feeds(list(data))
    grads_in = {name: torch.ones(()) for name in session.output_grad_names}
    onnxtrain.reset_peak_stats()
    base = onnxtrain.allocator_stats()["allocated"]
    out, state = session.run_forward(feeds, seed=1)
    session.run_backward(state, grads_in)
    assert onnxtrain.allocator_stats()["peak_allocated"] - base == predicted["peak"]
    assert predicted["stash"] < session.predict_memory(dims, without_plans=True)["stash"] or level == 0


class HalfStorage(torch.nn.Module):
    """float16 as storage: a float16 input and buffer, cast to float32 where they are used."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(8, 4))
        self.register_buffer("scale", torch.linspace(0.5, 1.5, 4).half())

    def forward(self, x):  # x: (B, 8) float16
        h = x.float() @ self.w * self.scale.float()
        return (h.half().float() ** 2).mean()


def test_float16_runs_as_storage_and_through_casts():
    torch.manual_seed(0)
    eager = HalfStorage()
    ours = copy.deepcopy(eager)
    wrapped = onnxtrain.Module(ours)
    x = torch.randn(5, 8).half()
    got, want = wrapped(x), eager(x)
    assert got.item() == pytest.approx(want.item(), rel=1e-6)
    got.backward()
    want.backward()
    torch.testing.assert_close(ours.w.grad, eager.w.grad, rtol=1e-5, atol=1e-7)
