"""Mixture-of-experts models of transformers (small configs, random weights) train as eager does: captured dense
(every expert on every token, weighted by its routing weight: onnxtrain._capture.experts), through onnxtrain.Module
(which switches the experts for the capture alone) and torch.compile (after onnxtrain.use_dense_experts): the loss
and every gradient at 1e-4 of the largest, the loss after 5 AdamW steps at 1e-3."""

import copy

import pytest
import torch

import onnxtrain

transformers = pytest.importorskip("transformers")

SMALL = dict(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=64, use_cache=False)


def mixtral():
    return transformers.MixtralForCausalLM(transformers.MixtralConfig(**SMALL, num_local_experts=4,
                                                                      num_experts_per_tok=2))


def qwen2_moe():
    return transformers.Qwen2MoeForCausalLM(transformers.Qwen2MoeConfig(
        **SMALL, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=24, shared_expert_intermediate_size=40))


def olmoe():
    return transformers.OlmoeForCausalLM(transformers.OlmoeConfig(**SMALL, num_experts=4, num_experts_per_tok=2))


def wrapped(model, door):
    if door == "module":
        return onnxtrain.Module(model)
    return torch.compile(onnxtrain.use_dense_experts(model), backend="onnxtrain")


@pytest.mark.parametrize("door", ["module", "compile"])
@pytest.mark.parametrize("make", [mixtral, qwen2_moe, olmoe])
def test_a_mixture_of_experts_trains_as_in_eager(make, door):
    torch.manual_seed(0)
    eager = make().train()
    ours = wrapped(copy.deepcopy(eager), door)
    ids = torch.randint(0, 64, (2, 10))
    loss = eager(input_ids=ids, labels=ids).loss
    loss.backward()
    got = ours(input_ids=ids, labels=ids).loss
    got.backward()
    assert abs(got.item() - loss.item()) <= 1e-5 * abs(loss.item())
    grads = {n: p.grad for n, p in eager.named_parameters() if p.grad is not None}
    largest = max(g.abs().max() for g in grads.values())
    for n, p in ours.named_parameters():
        n = n.removeprefix("_orig_mod.")
        if n in grads:
            assert p.grad is not None and (p.grad - grads[n]).abs().max() <= 1e-4 * largest, n
    steps = []
    for model in (eager, ours):
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        for _ in range(5):
            opt.zero_grad()
            model(input_ids=ids, labels=ids).loss.backward()
            opt.step()
        steps.append(model(input_ids=ids, labels=ids).loss.item())
    assert abs(steps[1] - steps[0]) <= 1e-3 * abs(steps[0]), steps


def test_the_capture_leaves_the_models_experts_as_they_were():
    model = mixtral().train()
    before = model.get_experts_implementation()
    onnxtrain.Module(model)(input_ids=torch.randint(0, 64, (1, 6)))
    assert model.get_experts_implementation() == before
