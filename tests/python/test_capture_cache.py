"""The capture cache (ONNXTRAIN_CAPTURE_CACHE): a second run of the same script captures nothing and trains as the
first; a changed model, script or call misses; a corrupt entry is captured again, never loaded; a folder that
cannot be written warns once and the module runs without it."""

import logging
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from gpt import GPT

import onnxtrain
from onnxtrain._capture import capture_cache, fingerprint


class Scaled(torch.nn.Module):
    def __init__(self, scale=2.0, width=4):
        super().__init__()
        self.fc = torch.nn.Linear(width, 3)
        self.scale = scale
        self.register_buffer("table", torch.arange(3.0), persistent=False)  # a constant of the graph

    def forward(self, x):
        return torch.relu(self.fc(x)) * self.scale + self.table


@pytest.fixture
def folder(tmp_path, monkeypatch):
    path = tmp_path / "captures"
    monkeypatch.setenv("ONNXTRAIN_CAPTURE_CACHE", str(path))
    monkeypatch.setenv("ONNXTRAIN_CAPTURE_PROCESS", "0")  # (faster here; the child's capture is tested elsewhere)
    return path


def step(model, x):
    wrapped = onnxtrain.Module(model)
    loss = wrapped(x).square().sum()
    loss.backward()
    return wrapped, loss.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None]


def entries(folder):
    return sorted(p for p in folder.iterdir() if p.suffix == ".capture") if folder.exists() else []


def test_a_second_module_of_the_same_model_loads_the_graph_and_trains_as_the_first(folder):
    x = torch.randn(2, 8, 4)
    first, loss1, grads1 = step(Scaled(), x)
    torch.manual_seed(1)  # other weights: values are inputs, not part of the graph
    model = Scaled()
    model.load_state_dict(first.module.state_dict())
    second, loss2, grads2 = step(model, x)
    assert (first.export_count, second.export_count) == (1, 0)
    assert len(entries(folder)) == 1
    torch.testing.assert_close(loss2, loss1)
    for a, b in zip(grads2, grads1):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("change", ["attribute", "width", "constant buffer", "frozen", "mode", "input shape",
                                    "hook"])
def test_a_changed_model_or_call_misses(folder, change):
    x = torch.randn(2, 8, 4)
    step(Scaled(), x)
    model = Scaled()
    if change == "attribute":
        model.scale = 3.0
    elif change == "width":
        model, x = Scaled(width=5), torch.randn(2, 8, 5)
    elif change == "constant buffer":
        model.table += 1
    elif change == "frozen":
        model.fc.bias.requires_grad_(False)
    elif change == "mode":
        model.fc.eval()
    elif change == "input shape":
        x = torch.randn(2, 1, 4)  # (a size 1 is specialized by torch.export)
    elif change == "hook":
        model.fc.register_forward_hook(lambda m, i, o: o * 2)
    wrapped, loss, _ = step(model, x)
    assert wrapped.export_count == 1, change
    assert len(entries(folder)) == 2
    torch.testing.assert_close(loss, model(x).square().sum())


def test_a_corrupt_entry_is_captured_again_not_loaded(folder, caplog):
    x = torch.randn(2, 8, 4)
    step(Scaled(), x)
    (entry,) = entries(folder)
    data = bytearray(entry.read_bytes())
    data[-10] ^= 0xFF
    entry.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING, logger="onnxtrain"):
        wrapped, _, _ = step(Scaled(), x)
    assert wrapped.export_count == 1
    assert "is corrupt (ValueError: its checksum does not match its contents)" in caplog.text
    assert step(Scaled(), x)[0].export_count == 0, "the entry is written again, whole"


def test_an_unwritable_folder_warns_once_and_runs(tmp_path, monkeypatch, caplog):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("ONNXTRAIN_CAPTURE_CACHE", str(blocker / "captures"))
    monkeypatch.setenv("ONNXTRAIN_CAPTURE_PROCESS", "0")
    x = torch.randn(2, 8, 4)
    with caplog.at_level(logging.WARNING, logger="onnxtrain"):
        runs = [step(Scaled(scale), x)[0] for scale in (2.0, 3.0)]
    assert [r.export_count for r in runs] == [1, 1]
    assert caplog.text.count("cannot be written") == 1


def test_a_module_it_cannot_fingerprint_is_captured_without_it(folder):
    model = Scaled()
    model.source = (i for i in range(3))  # a generator: its state cannot be read
    assert step(model, torch.randn(2, 8, 4))[0].export_count == 1
    assert entries(folder) == []


def test_disabled_and_cleared(folder, monkeypatch):
    x = torch.randn(2, 8, 4)
    step(Scaled(), x)
    step(Scaled(5.0), x)
    assert onnxtrain.clear_capture_cache(str(folder)) == 2
    assert entries(folder) == []
    monkeypatch.setenv("ONNXTRAIN_CAPTURE_CACHE", "0")
    assert step(Scaled(), x)[0].export_count == 1
    assert entries(folder) == []
    assert capture_cache.folder_of("") == capture_cache.default_folder()


SCRIPT = """
import sys
import torch
import onnxtrain
from gpt import GPT

class Head(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.gpt = GPT()

    def forward(self, ids):
        return self.gpt(ids).float().pow(2).mean()  # EDIT

torch.manual_seed(0)
model = onnxtrain.Module(Head())
loss = model(torch.randint(0, 64, (2, 16)))
loss.backward()
print(model.export_count, repr(loss.item()), repr(model.module.gpt.head.weight.grad.abs().sum().item()))
"""


def test_a_second_run_of_a_script_captures_nothing_and_an_edited_script_captures(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "ONNXTRAIN_CAPTURE_CACHE": str(tmp_path / "captures"),
           "PYTHONPATH": os.path.join(os.path.dirname(__file__), "..", "..", "examples")}

    def run():
        out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=600)
        assert out.returncode == 0, out.stderr[-3000:]
        return out.stdout.split()

    first, second = run(), run()
    assert first[0] == "1" and second == ["0", *first[1:]]
    script.write_text(SCRIPT.replace("pow(2).mean()  # EDIT", "pow(2).sum()"))
    assert run()[0] == "1"


def test_a_fingerprint_does_not_depend_on_weights_and_names_the_parameters():
    torch.manual_seed(0)
    a = fingerprint.of_module(GPT())
    torch.manual_seed(1)
    assert fingerprint.of_module(GPT()) == a
    assert any(part.startswith("parameter:weight:torch.float32") for part in a)


def test_a_transformers_model_has_one_fingerprint_across_processes():
    """Nothing that differs per process (transformers' GenerationConfig keeps a hash of itself) reaches the key."""
    pytest.importorskip("transformers")
    code = textwrap.dedent("""
        import hashlib, torch, transformers as T
        from onnxtrain._capture import fingerprint
        config = T.LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                               num_attention_heads=2, num_key_value_heads=1, use_cache=False)
        parts = fingerprint.of_module(T.LlamaForCausalLM(config).train())
        print(hashlib.sha256("\\n".join(parts).encode()).hexdigest())
        """)
    digests = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300).stdout
               for _ in range(2)]
    assert digests[0] and digests[0] == digests[1]
