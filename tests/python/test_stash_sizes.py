"""What a GPT's training forward keeps for backward without any recompute plan (level 0): no (B, H, T, T) attention
probabilities (the fused attention keeps each row's log-sum-exp) and no (B*T, vocab) scores (the fused head and
loss forms its gradients in forward): the largest value kept is the MLP's hidden activation (B, T, 4*dim), but for
the head weight's gradient (the size of a parameter, made at the end of forward instead of the start of backward).
Under bf16 autocast the same: the head's bf16 scores, cast to float32 for the loss, are not kept either."""

import os
import sys

import pytest
import torch

import onnxtrain

sys.path.insert(0, os.path.dirname(__file__))
from models import GPT, WithLoss  # noqa: E402

B, T, DIM, HEADS, VOCAB = 2, 128, 64, 4, 2048


@pytest.mark.parametrize("autocast", [False, True], ids=["float32", "bf16-autocast"])
def test_no_attention_probabilities_and_no_vocabulary_sized_scores_are_stashed(autocast):
    torch.manual_seed(0)
    model = onnxtrain.Module(WithLoss(GPT(vocab=VOCAB, dim=DIM, heads=HEADS, layers=2, block=T)).train())
    idx = torch.randint(0, VOCAB, (B, T))
    data = (idx, torch.roll(idx, -1, 1))
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        model(*data).backward()
        runner = next(r for r in model.runners() if r.training)
        _, state = runner.session.run_forward(runner.feeds(list(data)), seed=1)
    sizes = state.stash_values()
    element = 2 if autocast else 4
    hidden = B * T * 4 * DIM * element
    activations = {k: v for k, v in sizes.items() if v != VOCAB * DIM * element}  # but the head weight's gradient
    assert len(activations) == len(sizes) - 1
    assert max(activations.values()) == hidden, sorted(sizes.items(), key=lambda kv: -kv[1])[:5]
    assert hidden < B * HEADS * T * T * element and hidden < B * T * VOCAB * element  # either would have been larger
