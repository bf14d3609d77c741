"""Two onnxtrain.Modules captured at once in two threads, then training at once, give what each gives alone (issue
15, item 5). The captures end before the training starts: torch.export sets process-wide state while it traces
(torch.compiler.is_exporting(), which PyTorch's optimizers read), so PyTorch code running in another thread during
a capture may take other paths; onnxtrain's own modules wait for it (capture_lock)."""

import copy
import threading

import torch

import onnxtrain
from models import GPT


def batches(steps):
    g = torch.Generator().manual_seed(0)
    return [torch.randint(0, 65, (4, 32), generator=g) for _ in range(steps)]


def train(model, data, losses):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for idx in data:
        logits = model(idx)
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), torch.roll(idx, -1, 1).flatten())
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())


def test_two_modules_training_in_two_threads_match_one_after_the_other():
    torch.manual_seed(0)
    base = GPT(dropout=0.0)
    data = batches(8)
    alone = onnxtrain.Module(copy.deepcopy(base))
    reference = []
    train(alone, data, reference)

    models = [onnxtrain.Module(copy.deepcopy(base)) for _ in range(2)]
    losses = [[], []]
    errors = []

    captured = threading.Barrier(2)

    def run(i):
        try:
            models[i](data[0])  # captured, both threads at once
            captured.wait()
            train(models[i], data, losses[i])
        except BaseException as e:  # noqa: BLE001 - reported below, with the thread it came from
            errors.append((i, e))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for i in range(2):
        assert losses[i] == reference, f"thread {i}"
        for (name, p), q in zip(alone.named_parameters(), models[i].parameters()):
            assert torch.equal(p, q), f"thread {i}: {name}"
