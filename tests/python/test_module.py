"""onnxtrain.Module against PyTorch eager: outputs, every parameter gradient, and 10 AdamW steps."""

import copy

import numpy as np
import pytest
import torch
from torch import nn

import onnxtrain
from models import BERT, CNN, GPT, MLP, WithLoss


def gpt_batch(b, t):
    idx = torch.randint(0, 65, (b, t))
    return idx, torch.roll(idx, -1, 1)


def bert_batch(b, t):
    mask = (torch.arange(t)[None, :] < torch.randint(t // 2, t + 1, (b, 1))).float()
    return torch.randint(0, 100, (b, t)), mask, torch.randint(0, 100, (b, t))


class Encoder(nn.Module):
    """torch.nn.TransformerEncoder with a classification loss."""

    def __init__(self):
        super().__init__()
        layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
        self.enc = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(32, 5)

    def forward(self, x, y):
        return nn.functional.cross_entropy(self.head(self.enc(x).mean(1)), y)


# nn.MultiheadAttention's TorchScript export bakes the batch size into its reshapes (bsz * num_heads), so
# nn.TransformerEncoder is checked at one size: a known limit of that exporter path.
SIZES = {"transformer_encoder": [(2, 8)]}

MODELS = {
    "mlp": (lambda: WithLoss(MLP()), lambda b, t: (torch.randn(b, 16), torch.randint(0, 10, (b,)))),
    "cnn": (lambda: WithLoss(CNN()), lambda b, t: (torch.randn(b, 3, t, t), torch.randint(0, 10, (b,)))),
    "gpt": (lambda: WithLoss(GPT(vocab=65, dim=32, heads=4, layers=2, block=32)), gpt_batch),
    "bert": (lambda: WithLoss(BERT(vocab=100, dim=32, heads=4, layers=2, block=32)), bert_batch),
    "transformer_encoder": (Encoder, lambda b, t: (torch.randn(b, t, 32), torch.randint(0, 5, (b,)))),
}


def rel(a, b):
    return float((a - b).abs().max() / b.abs().max().clamp(min=1e-3))


@pytest.mark.parametrize("name", list(MODELS))
def test_matches_eager(name):
    make, batch = MODELS[name]
    torch.manual_seed(0)
    eager = make().train()
    ours = copy.deepcopy(eager)
    wrapped = onnxtrain.Module(ours)
    for b, t in SIZES.get(name, [(2, 8), (3, 12)]):  # two sizes, one export
        args = batch(b, t)
        want, got = eager(*args), wrapped(*args)
        assert rel(got.detach(), want.detach()) < 1e-5
        eager.zero_grad()
        ours.zero_grad()
        want.backward()
        got.backward()
        for (n, p), q in zip(ours.named_parameters(), eager.parameters()):
            assert rel(p.grad, q.grad) < 1e-4, n
    assert wrapped.export_count == 1
    # BatchNorm statistics move as in eager. (Checked before the optimizer steps: AdamW turns the float
    # noise of gradients that are zero in exact arithmetic, a conv bias before BatchNorm, into +-lr steps.)
    for a, b in zip(ours.buffers(), eager.buffers()):
        assert torch.allclose(a.float(), b.float(), rtol=1e-4, atol=1e-5)
    opt_e = torch.optim.AdamW(eager.parameters(), lr=1e-2)
    opt_o = torch.optim.AdamW(wrapped.parameters(), lr=1e-2)
    args = batch(2, 8)
    losses = {id(eager): [], id(wrapped): []}
    for _ in range(10):
        for model, opt in ((eager, opt_e), (wrapped, opt_o)):
            opt.zero_grad()
            loss = model(*args)
            loss.backward()
            opt.step()
            losses[id(model)].append(loss.item())
    np.testing.assert_allclose(losses[id(wrapped)], losses[id(eager)], rtol=1e-3)


class Nested(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 3)
        self.b = nn.Linear(4, 3)

    def forward(self, pair, extra=None, scale=1.0):
        x, y = pair
        out = {"sum": self.a(x) * scale + self.b(y["v"])}
        if extra is not None:
            out["extra"] = (extra * 2, extra.argmax(-1))
        return out


def test_nested_inputs_and_outputs_keywords_and_constants():
    torch.manual_seed(0)
    eager = Nested()
    wrapped = onnxtrain.Module(copy.deepcopy(eager))
    x, v, e = torch.randn(2, 4), torch.randn(2, 4), torch.randn(2, 5)
    got = wrapped((x, {"v": v}), extra=e, scale=2.0)
    want = eager((x, {"v": v}), extra=e, scale=2.0)
    assert torch.allclose(got["sum"], want["sum"], atol=1e-6)
    assert torch.allclose(got["extra"][0], want["extra"][0]) and torch.equal(got["extra"][1], want["extra"][1])
    assert got["extra"][1].dtype == torch.int64 and not got["extra"][1].requires_grad
    got["sum"].sum().backward()
    assert wrapped.export_count == 1
    wrapped((x, {"v": v}), extra=e, scale=2.0)
    assert wrapped.export_count == 1, "same schema, no re-export"
    wrapped((x, {"v": v}), extra=e, scale=3.0)
    assert wrapped.export_count == 2, "a changed constant re-exports"
    wrapped((x, {"v": v}))
    assert wrapped.export_count == 3, "a changed structure re-exports"


def test_inputs_that_require_grad_get_gradients():
    torch.manual_seed(0)
    lin = nn.Linear(4, 2)
    wrapped = onnxtrain.Module(copy.deepcopy(lin))
    x = torch.randn(3, 4, requires_grad=True)
    x2 = x.detach().clone().requires_grad_()
    wrapped(x).pow(2).sum().backward()
    lin(x2).pow(2).sum().backward()
    assert torch.allclose(x.grad, x2.grad, atol=1e-6)


def test_eval_and_no_grad_use_their_own_graph():
    torch.manual_seed(0)
    eager = nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.5), nn.BatchNorm1d(8))
    wrapped = onnxtrain.Module(copy.deepcopy(eager))
    x = torch.randn(6, 8)
    wrapped.eval()
    eager.eval()
    assert torch.allclose(wrapped(x), eager(x), atol=1e-6)
    wrapped.train()
    with torch.no_grad():
        out = wrapped(x)
    assert not out.requires_grad
    assert wrapped.export_count == 2


def test_state_dict_round_trip_and_names():
    torch.manual_seed(0)
    model = CNN()
    wrapped = onnxtrain.Module(model)
    assert list(wrapped.state_dict()) == list(model.state_dict())
    assert [n for n, _ in wrapped.named_parameters()] == [n for n, _ in model.named_parameters()]
    sd = {k: v.clone() + 1 for k, v in wrapped.state_dict().items()}
    wrapped.load_state_dict(sd)
    assert torch.equal(model.fc.bias, sd["fc.bias"])
    assert wrapped.module is model


def test_wrapping_a_submodule_composes():
    torch.manual_seed(0)
    eager = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
    ours = copy.deepcopy(eager)
    ours[0] = onnxtrain.Module(ours[0])
    x = torch.randn(5, 4)
    eager(x).sum().backward()
    ours(x).sum().backward()
    assert torch.allclose(ours[0].module.weight.grad, eager[0].weight.grad, atol=1e-6)
    assert torch.allclose(ours[2].weight.grad, eager[2].weight.grad, atol=1e-6)


def test_outputs_hold_onnxtrain_memory_without_copies():
    wrapped = onnxtrain.Module(nn.Linear(256, 256))
    x = torch.randn(64, 256)
    wrapped.eval()
    wrapped(x)
    before = onnxtrain.allocator_stats()["allocated"]
    out = wrapped(x)
    held = onnxtrain.allocator_stats()["allocated"] - before
    assert held >= out.numel() * 4, "the output tensor is the graph's own buffer"
    del out
    assert onnxtrain.allocator_stats()["allocated"] - before < held


class Unsupported(nn.Module):
    def forward(self, x):
        return torch.linalg.det(x)


def test_unsupported_op_error_and_fallback(monkeypatch):
    x = torch.randn(2, 3, 3)
    with pytest.raises(onnxtrain.UnsupportedError,
                       match=r"onnxtrain.Module\(Unsupported\).*Det.*ONNXTRAIN_FALLBACK=torch"):
        onnxtrain.Module(Unsupported())(x)
    monkeypatch.setenv("ONNXTRAIN_FALLBACK", "torch")
    wrapped = onnxtrain.Module(Unsupported())
    assert torch.allclose(wrapped(x), torch.linalg.det(x))
    monkeypatch.setenv("ONNXTRAIN_FALLBACK", "maybe")
    with pytest.raises(ValueError, match="ONNXTRAIN_FALLBACK"):
        onnxtrain.Module(Unsupported())


def test_dropout_follows_torch_manual_seed():
    model = onnxtrain.Module(nn.Sequential(nn.Linear(16, 16), nn.Dropout(0.5)))
    x = torch.randn(4, 16)
    torch.manual_seed(3)
    a = model(x)
    torch.manual_seed(3)
    b = model(x)
    c = model(x)
    assert torch.equal(a, b) and not torch.equal(b, c)


class MyExp(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = x.exp()
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        return g * y


class WithCustomFunction(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, x):
        return MyExp.apply(self.lin(x)).sum()


def test_a_custom_autograd_function_runs_its_own_backward():
    torch.manual_seed(0)
    eager = WithCustomFunction()
    ours = onnxtrain.Module(WithCustomFunction())
    ours.load_state_dict(eager.state_dict())
    x = torch.randn(2, 3)
    eager(x).backward()
    ours(x).backward()
    for (n, p), q in zip(ours.named_parameters(), eager.parameters()):
        torch.testing.assert_close(p.grad, q.grad, msg=n)


def test_inputs_and_outputs_cross_without_copies():
    wrapped = onnxtrain.Module(nn.Identity()).eval()
    x = torch.randn(3, 4)
    y = wrapped(x)
    assert y.data_ptr() == x.data_ptr(), "the input's memory goes in and comes back out as it is"


def test_environment_options_save_graphs_and_log_phases(monkeypatch, tmp_path, caplog):
    monkeypatch.setenv("ONNXTRAIN_SAVE_ONNX", str(tmp_path))
    monkeypatch.setenv("ONNXTRAIN_LOG_LEVEL", "INFO")
    wrapped = onnxtrain.Module(nn.Linear(4, 2))
    with caplog.at_level("INFO", logger="onnxtrain"):
        wrapped(torch.randn(3, 4)).sum().backward()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["Linear_train_exported.onnx", "Linear_train_optimized.onnx"]
    assert any("exported in" in r.message and "session built in" in r.message for r in caplog.records)


@pytest.mark.parametrize("variable", ["ONNXTRAIN_MEMORY_OPT_CONFIG", "ORTMODULE_MEMORY_OPT_CONFIG"])
def test_memory_config_from_the_environment_keeps_gradients(monkeypatch, variable):
    torch.manual_seed(0)
    eager = WithLoss(GPT(vocab=65, dim=32, heads=4, layers=2, block=32))
    idx = torch.randint(0, 65, (2, 8))
    plain = onnxtrain.Module(copy.deepcopy(eager))
    plain(idx, idx).backward()
    monkeypatch.setenv(variable, "Gelu+:1:-1,LayerNormalization+:1:-1")
    planned = onnxtrain.Module(copy.deepcopy(eager))
    planned(idx, idx).backward()
    report = planned.memory_report({"input_0_dim0": 2, "input_0_dim1": 8})  # WithLoss takes *args: input_<i>
    assert "Gelu+ | [input_0_dim0, input_0_dim1, 128] | 2 | ON (2/2) | 512*input_0_dim0*input_0_dim1 = 8192" in report
    for (n, p), q in zip(planned.named_parameters(), plain.parameters()):
        assert torch.equal(p.grad, q.grad), n


def test_memory_budget_option_keeps_gradients_and_reports(monkeypatch):
    torch.manual_seed(0)
    eager = WithLoss(GPT(vocab=65, dim=32, heads=4, layers=2, block=32))
    idx = torch.randint(0, 65, (2, 8))
    plain = onnxtrain.Module(copy.deepcopy(eager))
    plain(idx, idx).backward()
    planned = onnxtrain.Module(copy.deepcopy(eager), onnxtrain.Options(memory_budget=0.5))
    planned(idx, idx).backward()
    assert "budget 50% of the stash" in planned.memory_report()
    for (n, p), q in zip(planned.named_parameters(), plain.parameters()):
        assert torch.equal(p.grad, q.grad), n
    monkeypatch.setenv("ONNXTRAIN_MEMORY_BUDGET", "300KiB")  # the whole step's predicted peak
    sized = onnxtrain.Module(copy.deepcopy(eager))
    sized(idx, idx).backward()
    report = sized.memory_report()
    assert "budget 0.29 MiB for the step's peak" in report and "predicted with plans" in report, report
    for (n, p), q in zip(sized.named_parameters(), plain.parameters()):
        assert torch.equal(p.grad, q.grad), n
    monkeypatch.setenv("ONNXTRAIN_MEMORY_BUDGET", "half")
    with pytest.raises(onnxtrain.ConfigError, match="memory budget 'half'"):
        onnxtrain.Module(nn.Linear(2, 2))


@pytest.mark.parametrize("variable", ["ONNXTRAIN_MEMORY_OPT_LEVEL", "ORTMODULE_MEMORY_OPT_LEVEL"])
def test_memory_level_from_the_environment(monkeypatch, variable):
    torch.manual_seed(0)
    eager = WithLoss(GPT(vocab=65, dim=32, heads=4, layers=2, block=32))
    idx = torch.randint(0, 65, (2, 8))
    plain = onnxtrain.Module(copy.deepcopy(eager))
    plain(idx, idx).backward()
    monkeypatch.setenv(variable, "1")
    layered = onnxtrain.Module(copy.deepcopy(eager))
    layered(idx, idx).backward()
    assert "level 1: 2 transformer layers" in layered.memory_report()
    assert layered.last_stash_bytes() < plain.last_stash_bytes()
    for (n, p), q in zip(layered.named_parameters(), plain.parameters()):
        assert torch.equal(p.grad, q.grad), n
    monkeypatch.setenv(variable, "3")
    with pytest.raises(ValueError, match="level '3' is not 0, 1 or 2"):
        onnxtrain.Module(nn.Linear(2, 2))


def symbolic_dims(wrapped):
    """Per graph input of the wrapped module's last graph, which of its dims are symbols."""
    graph = wrapped.runners()[-1].exported.model.graph
    return {i.name: [d.HasField("dim_param") for d in i.type.tensor_type.shape.dim] for i in graph.input}


@pytest.mark.parametrize("dynamic", ["all", "batch", "none"])
def test_the_dims_taken_as_symbols_are_the_options(monkeypatch, dynamic):
    torch.manual_seed(0)
    eager = WithLoss(GPT(vocab=65, dim=32, heads=4, layers=2, block=32))
    monkeypatch.setenv("ONNXTRAIN_CAPTURE_CACHE", "0")
    wrapped = onnxtrain.Module(copy.deepcopy(eager), onnxtrain.Options(dynamic=dynamic))
    for b, t in [(2, 8), (3, 8), (3, 6)]:
        idx, tgt = gpt_batch(b, t)
        torch.testing.assert_close(wrapped(idx, tgt), eager(idx, tgt), rtol=1e-5, atol=1e-5)
    assert symbolic_dims(wrapped)["input_0"] == {"all": [True, True], "batch": [True, False],
                                                 "none": [False, False]}[dynamic]
    assert wrapped.export_count == {"all": 1, "batch": 2, "none": 3}[dynamic]
    monkeypatch.setenv("ONNXTRAIN_DYNAMIC", "seq")
    with pytest.raises(ValueError, match="ONNXTRAIN_DYNAMIC / Options.dynamic is 'seq'"):
        onnxtrain.Module(nn.Linear(2, 2))


def test_an_output_of_an_unsupported_type_is_an_unsupported_error_naming_it():
    """A transformers model that returns its key-value cache (use_cache=True) is told how to stop it, at once
    (no fallback capture: no exporter would return the cache either)."""
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(vocab_size=50, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                      num_attention_heads=2, num_key_value_heads=1, use_cache=True)
    model = onnxtrain.Module(transformers.LlamaForCausalLM(config))
    ids = torch.randint(0, 50, (1, 6))
    with pytest.raises(onnxtrain.UnsupportedError, match=r"outputs of type DynamicCache .*use_cache=False"):
        model(input_ids=ids, labels=ids)
