"""Captures against calls of onnxtrain modules in other threads. PyTorch's exporters change process-wide state while
they trace: torch.export's FX tracer replaces torch.nn.Module.__call__ for every thread, and onnxtrain forks the
random generator and redirects stdout around them. So one capture runs at a time, and no onnxtrain module is called
in another thread meanwhile (a call waits for the capture; a capture waits for the calls under way). A thread's
own calls never wait for its own capture (the traced module may hold onnxtrain modules)."""

import contextlib
import threading

_state = threading.Condition()
_calls = {}        # thread id -> calls of onnxtrain modules under way in it
_capturing = None  # the thread id of the capture under way
_depth = 0         # captures under way in it (a traced module may capture one it holds)


@contextlib.contextmanager
def calling():
    me = threading.get_ident()
    with _state:
        while _capturing not in (None, me):
            _state.wait()
        _calls[me] = _calls.get(me, 0) + 1
    try:
        yield
    finally:
        with _state:
            _calls[me] -= 1
            if not _calls[me]:
                del _calls[me]
            _state.notify_all()


@contextlib.contextmanager
def capturing():
    """Held while a capture runs. A thread captures outside its calls where it can (Module.__call__ does): two
    threads each inside a call and each waiting to capture would wait for each other."""
    global _capturing, _depth
    me = threading.get_ident()
    with _state:
        while _capturing not in (None, me) or any(t != me for t in _calls):
            _state.wait()
        _capturing = me
        _depth += 1
    try:
        yield
    finally:
        with _state:
            _depth -= 1
            if not _depth:
                _capturing = None
            _state.notify_all()
