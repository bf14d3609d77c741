"""The parity check of a model trained through onnxtrain against its eager copy: the loss and logits, every
parameter gradient (relative to the gradient's scale), and the losses of some AdamW steps."""

import numpy as np
import pytest
import torch


def assert_trains_as_eager(eager, ours, wrapped, kw, steps):
    """`ours` is a copy of `eager`, `wrapped` ours through a front door; `kw` the batch."""
    got, want = wrapped(**kw), eager(**kw)
    assert got.loss.item() == pytest.approx(want.loss.item(), rel=1e-5)
    torch.testing.assert_close(got.logits, want.logits, rtol=1e-5, atol=1e-5)
    got.loss.backward()
    want.loss.backward()
    for (n, p), (_, q) in zip(ours.named_parameters(), eager.named_parameters()):
        if q.grad is not None:
            assert float((p.grad - q.grad).abs().max() / q.grad.abs().max().clamp(min=1e-3)) < 1e-4, n
    return assert_steps_as_eager(eager, ours, wrapped, kw, steps)


def assert_steps_as_eager(eager, ours, wrapped, kw, steps):
    """`steps` AdamW steps of eager and of ours through `wrapped` on the batch `kw`: the losses agree (1e-3);
    eager's losses."""
    opts = [torch.optim.AdamW(m.parameters(), lr=1e-3) for m in (eager, ours)]
    losses = [[], []]
    for _ in range(steps):
        for k, model in enumerate((eager, wrapped)):
            opts[k].zero_grad()
            loss = model(**kw).loss
            loss.backward()
            opts[k].step()
            losses[k].append(loss.item())
    np.testing.assert_allclose(losses[1], losses[0], rtol=1e-3)
    return losses[0]
