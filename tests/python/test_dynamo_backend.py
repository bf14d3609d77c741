"""torch.compile(model, backend="onnxtrain"): registered by the package's entry point; captured graphs train in
onnxtrain with parity to eager, across graph breaks, and with dynamic sizes without a new export per size."""

import copy

import pytest
import torch
from torch.nn import functional as F

import onnxtrain
import onnxtrain.dynamo
from models import GPT


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def spy_backend(made):
    """The onnxtrain backend, keeping what it compiles (each graph's callable)."""
    def compile_graph(gm, example_inputs, **kwargs):
        fn = onnxtrain.dynamo.backend(gm, example_inputs, **kwargs)
        made.append(fn)
        return fn
    return compile_graph


def lm_loss(model, idx):
    logits = model(idx)
    return F.cross_entropy(logits.flatten(0, 1), torch.roll(idx, -1, 1).flatten())


def train_both(model, compiled, batches):
    """AdamW steps of `compiled` (wrapping `model`) next to an eager copy of `model` made before the first."""
    eager = copy.deepcopy(model)
    opt_c = torch.optim.AdamW(model.parameters(), lr=1e-3)
    opt_e = torch.optim.AdamW(eager.parameters(), lr=1e-3)
    for idx in batches:
        lc, le = lm_loss(compiled, idx), lm_loss(eager, idx)
        assert abs(lc.item() - le.item()) <= 1e-4 * abs(le.item())
        lc.backward()
        le.backward()
        for (name, p), q in zip(model.named_parameters(), eager.parameters()):
            scale = q.grad.abs().max().item() + 1e-12
            assert (p.grad - q.grad).abs().max().item() <= 1e-4 * scale, name
        opt_c.step(), opt_e.step(), opt_c.zero_grad(), opt_e.zero_grad()
    for p, q in zip(model.parameters(), eager.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-3, atol=1e-4)


def test_the_backend_is_registered_by_name():
    assert "onnxtrain" in torch._dynamo.list_backends()
    torch.manual_seed(0)
    model = GPT(dropout=0.0)
    compiled = torch.compile(model, backend="onnxtrain", options={"memory_opt_level": 1})
    g = torch.Generator().manual_seed(1)
    train_both(model, compiled, [torch.randint(0, 65, (4, 32), generator=g) for _ in range(3)])


def test_a_gpt_trains_like_eager_and_every_graph_runs_in_onnxtrain():
    torch.manual_seed(0)
    model, made = GPT(dropout=0.0), []
    compiled = torch.compile(model, backend=spy_backend(made), options={"memory_opt_level": 1})
    g = torch.Generator().manual_seed(1)
    train_both(model, compiled, [torch.randint(0, 65, (4, 32), generator=g) for _ in range(5)])
    assert len(made) == 1
    module = made[0].onnxtrain_module
    assert module._options.memory_opt_level == 1
    assert "level 1" in module.memory_report()


def test_dynamic_sizes_are_one_export():
    torch.manual_seed(0)
    model, made = GPT(dropout=0.0), []
    compiled = torch.compile(model, backend=spy_backend(made), dynamic=True)
    g = torch.Generator().manual_seed(1)
    sizes = [(4, 32), (2, 16), (3, 24), (4, 32)]
    train_both(model, compiled, [torch.randint(0, 65, s, generator=g) for s in sizes])
    assert len(made) == 1
    assert made[0].onnxtrain_module.export_count == 1


class Normed(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(16, 16)
        self.norm = torch.nn.RMSNorm(16, eps=1e-5)

    def forward(self, x):
        return (self.norm(self.fc(x)).float() ** 2).mean()


def test_a_float_attribute_is_a_constant_of_each_value_it_takes(caplog):
    """Under dynamic=True TorchDynamo passes a module's float (RMSNorm's eps) as a tensor read by .item(), which
    torch.export cannot capture where an op branches on it (rms_norm under autocast): the backend takes it as a
    constant, a graph for each value, captured by torch.export (the TorchScript-based fallback said why before)."""
    torch.manual_seed(0)
    model, made = Normed(), []
    eager = copy.deepcopy(model)
    compiled = torch.compile(model, backend=spy_backend(made), dynamic=True)
    x = torch.randn(3, 5, 16) * 1e-2
    for eps in (1e-5, 1e-2, 1e-5):
        model.norm.eps = eager.norm.eps = eps
        with torch.autocast("cpu", torch.bfloat16):
            got, want = compiled(x), eager(x)
        assert got.item() == pytest.approx(want.item(), rel=1e-2), eps
    assert made and "cannot capture" not in caplog.text
    for fn in made:  # (TorchDynamo may compile again for another value, or pass it)
        for module in fn.onnxtrain_modules.values():
            assert [r.exported.exporter for r in module.runners()] == ["torch.export"]


class Scaled(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x, s):
        k = s.item()  # (a graph break: the graph after it takes the float as a tensor)
        return (self.fc(x) * k).sum()


def test_a_float_the_code_computes_stays_an_argument():
    """A float computed in the code (not an attribute) may change every call: one export serves every value."""
    torch.manual_seed(0)
    model, made = Scaled(), []
    compiled = torch.compile(model, backend=spy_backend(made), dynamic=True)
    x = torch.randn(3, 4)
    for k in (0.5, 2.0, -3.0):
        assert compiled(x, torch.tensor(k)).item() == pytest.approx(model(x, torch.tensor(k)).item(), rel=1e-5)
    assert [[m.export_count for m in fn.onnxtrain_modules.values()] for fn in made] == [[1]]


class Broken(torch.nn.Module):
    """A GPT whose forward has a graph break (a print) and a branch on data: three graphs, PyTorch between."""

    def __init__(self):
        super().__init__()
        self.gpt = GPT(dropout=0.0)
        self.scale = torch.nn.Parameter(torch.ones(65))

    def forward(self, idx):
        logits = self.gpt(idx)
        print("graph break")
        if logits.mean() > 0:  # data-dependent: another break
            return logits * self.scale
        return logits - self.scale


def test_graph_breaks_leave_the_parts_between_to_pytorch(capsys):
    torch.manual_seed(0)
    model, made = Broken(), []
    compiled = torch.compile(model, backend=spy_backend(made))
    g = torch.Generator().manual_seed(1)
    train_both(model, compiled, [torch.randint(0, 65, (2, 16), generator=g) for _ in range(3)])
    assert len(made) >= 2
    assert "graph break" in capsys.readouterr().out


def test_automatic_dynamic_shapes_compile_once_more_then_serve_every_size():
    # PyTorch's default: the first graph is specialized on its sizes; the first size change recompiles with
    # symbolic sizes, which then serve every later size.
    torch.manual_seed(0)
    model, made = GPT(dropout=0.0), []
    compiled = torch.compile(model, backend=spy_backend(made))
    g = torch.Generator().manual_seed(1)
    sizes = [(4, 32), (2, 16), (3, 24), (2, 8)]
    train_both(model, compiled, [torch.randint(0, 65, s, generator=g) for s in sizes])
    assert len(made) == 2
    assert [fn.onnxtrain_module.export_count for fn in made] == [1, 1]


class WithDet(torch.nn.Module):
    """A graph with an op onnxtrain does not run (Det)."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.eye(3) + 0.1)

    def forward(self, x):
        return torch.linalg.det(x @ self.w).sum()


def test_a_graph_onnxtrain_cannot_run_is_named_and_runs_in_pytorch_only_when_allowed(caplog):
    x = torch.randn(2, 3, 3)
    with pytest.raises(onnxtrain.UnsupportedError, match="Det"):
        torch.compile(WithDet(), backend="onnxtrain")(x)
    torch._dynamo.reset()
    model = WithDet()
    eager = copy.deepcopy(model)
    compiled = torch.compile(model, backend="onnxtrain", options={"fallback": "torch"})
    for _ in range(2):
        compiled(x).backward()
        eager(x).backward()
    torch.testing.assert_close(model.w.grad, eager.w.grad)
    warnings = [r for r in caplog.records if "fallback" in r.getMessage()]
    assert len(warnings) == 1 and "Det" in warnings[0].getMessage()
