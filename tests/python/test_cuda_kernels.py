"""Every op of the training graphs onnxtrain is meant to run on a GPU has a CUDA kernel: transformers' Llama, Qwen2,
BERT and GPT-2 (float32 and under bf16 autocast) through onnxtrain.Module, and through torch.compile, and the toy GPT.
Checked on the CPU, where the build compiles the CUDA kernels (CI has no GPU): Session.ops_without_kernel("cuda") on
each captured training graph. A new fusion or gradient op without a CUDA kernel fails here, not on the next GPU."""
import os
import sys

import pytest
import torch
from test_transformers_parity import MODELS, batch

import onnxtrain
from onnxtrain import dynamo

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))


def without_cuda_kernel(module):
    """The ops of each of an onnxtrain.Module's training graphs with no CUDA kernel."""
    missing = set()
    for runner in module.runners():
        try:
            missing.update(runner.session.ops_without_kernel("cuda"))
        except onnxtrain.UnsupportedError:
            pytest.skip("this build has no CUDA kernels")
    return missing


def trained(model, bf16, **kw):
    with torch.autocast("cpu", torch.bfloat16, enabled=bf16):
        loss = model(**kw).loss
    loss.backward()


@pytest.mark.parametrize("bf16", [False, True])
@pytest.mark.parametrize("name", ["llama", "qwen2", "bert", "gpt2"])
def test_the_families_training_graphs_have_cuda_kernels(name, bf16):
    torch.manual_seed(0)
    if name == "gpt2":
        from real_size import make_model

        module = onnxtrain.Module(make_model("gpt2", tiny=True).train())
        ids = torch.randint(0, 1000, (2, 16))
        trained(module, bf16, input_ids=ids, labels=ids)
    else:
        module = onnxtrain.Module(MODELS[name]().train())
        trained(module, bf16, **batch())
    assert without_cuda_kernel(module) == set()


@pytest.mark.parametrize("name", ["llama", "bert"])
def test_torch_compiles_training_graphs_have_cuda_kernels(name):
    modules = []

    def backend(gm, examples, options=None):
        run = dynamo.backend(gm, examples, options)
        modules.append(run.onnxtrain_module)
        return run

    torch.manual_seed(0)
    torch._dynamo.reset()
    trained(torch.compile(MODELS[name]().train(), backend=backend), False, **batch())
    assert modules and all(without_cuda_kernel(m) == set() for m in modules)


def test_the_toy_gpts_training_graph_has_cuda_kernels():
    from models import GPT

    torch.manual_seed(0)
    module = onnxtrain.Module(GPT(vocab=65, dim=64, heads=4, layers=2, block=32, dropout=0.1).train())
    idx = torch.randint(0, 65, (4, 32))
    logits = module(idx)
    torch.nn.functional.cross_entropy(logits.reshape(-1, 65), idx.reshape(-1)).backward()
    assert without_cuda_kernel(module) == set()
