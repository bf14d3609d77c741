"""Captures run in a forked child process (Options.capture_process, on by default): the exporters' imports never
reach the training process, the child's failures arrive as errors (a crash names its signal, an exception keeps
its type, log records reach the parent's handlers), and a capture stays in the process where forking is unsafe.
Each case runs in a fresh interpreter, so that what it imports is its own."""

import os
import subprocess
import sys
import textwrap

PROLOGUE = """
import logging, os, signal, sys, threading
import torch
import onnxtrain

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x):
        return torch.relu(self.fc(x))

def step(module):
    module(torch.randn(2, 4)).sum().backward()
"""


def run(body, **env):
    out = subprocess.run([sys.executable, "-c", PROLOGUE + textwrap.dedent(body)], capture_output=True, text=True,
                         env={**os.environ, **env}, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout.split()


def test_the_exporters_imports_stay_out_of_the_training_process():
    body = """
        module = onnxtrain.Module(Net())
        step(module)
        print(module.export_count, "torch._dynamo" in sys.modules, "torch.export._trace" in sys.modules)
        """
    assert run(body) == ["1", "False", "False"]
    assert run(body, ONNXTRAIN_CAPTURE_PROCESS="0") == ["1", "True", "True"]


def test_a_capture_with_other_threads_running_stays_in_the_process():
    body = """
        stop = threading.Event()
        waiting = threading.Thread(target=stop.wait)
        waiting.start()
        step(onnxtrain.Module(Net()))
        stop.set()
        waiting.join()
        print("torch._dynamo" in sys.modules)
        """
    assert run(body) == ["True"]


def test_a_child_killed_while_capturing_is_an_error_naming_the_signal():
    body = """
        class Dies(Net):
            def forward(self, x):
                os.kill(os.getpid(), signal.SIGKILL)  # (forward runs only when captured: in the child)

        try:
            step(onnxtrain.Module(Dies()))
        except onnxtrain.Error as e:
            print("SIGKILL" in str(e), "capture_process=False" in str(e))
        """
    assert run(body) == ["True", "True"]


def test_errors_keep_their_type_and_log_records_reach_the_parent():
    body = """
        class Exp(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x, options):
                return x.exp()

            @staticmethod
            def backward(ctx, g):
                return g, None

        class Custom(Net):  # (a Function taking an argument the graph cannot hold: refused in the child)
            def forward(self, x):
                return Exp.apply(self.fc(x), {"not": "json-able in a key"})

        try:
            step(onnxtrain.Module(Custom()))
        except onnxtrain.UnsupportedError as e:
            print("custom-function-refused", "Function Exp" in str(e))

        class Untraceable(Net):  # torch.export refuses data-dependent control flow; the TorchScript exporter traces
            def forward(self, x):
                return self.fc(x) if x.sum() > -1e9 else -self.fc(x)

        records = []
        handler = logging.Handler()
        handler.emit = records.append
        logging.getLogger("onnxtrain").addHandler(handler)
        step(onnxtrain.Module(Untraceable()))
        print("fallback-logged", any("TorchScript-based exporter" in r.getMessage() for r in records))
        """
    assert run(body) == ["custom-function-refused", "True", "fallback-logged", "True"]


def test_a_capture_in_this_process_leaves_little_behind():
    """After a capture where forking is unsafe, neither the traced graph, its fake tensors, its ShapeEnv nor its
    memory stay (before the tracing leftovers were dropped, a 4-layer GPT's second capture left 214 fake tensors and
    5.8 MiB; before the ShapeEnv's tracked fakes were, one ShapeEnv and one fake tensor a capture): the second of two
    captures (the first warms up what stays for good: imports, kernels) grows the process by at most 5 MiB and
    leaves no FX graph, ShapeEnv or fake tensor."""
    body = """
        import ctypes, gc
        from torch._subclasses.fake_tensor import FakeTensor
        from torch.fx import GraphModule
        from torch.fx.experimental.symbolic_shapes import ShapeEnv
        sys.path.insert(0, "examples")
        from gpt import GPT

        def rss_mib():
            gc.collect()
            gc.collect()  # (what the first collection's finalizers let go of)
            ctypes.CDLL("libc.so.6").malloc_trim(0)
            with open("/proc/self/status") as f:
                return next(int(l.split()[1]) for l in f if l.startswith("VmRSS")) / 1024

        def capture(seed):
            torch.manual_seed(seed)
            model = onnxtrain.Module(GPT(vocab=65, dim=128, heads=4, layers=4, block=64))
            model(torch.randint(0, 65, (4, 64))).sum().backward()

        def leftovers():
            return [sum(isinstance(o, t) for o in gc.get_objects()) for t in (GraphModule, ShapeEnv, FakeTensor)]

        capture(0)
        before = rss_mib()
        held = leftovers()
        capture(1)
        after = rss_mib()
        print(*held, *leftovers(), after - before <= 5)
        """
    assert run(body, ONNXTRAIN_CAPTURE_PROCESS="0", ONNXTRAIN_CAPTURE_CACHE="0") == ["0"] * 6 + ["True"]
