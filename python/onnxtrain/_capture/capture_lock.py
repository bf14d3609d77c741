"""Captures against calls of onnxtrain modules in other threads. PyTorch's exporters change process-wide state while
they trace: torch.export's FX tracer replaces torch.nn.Module.__call__ for every thread, and onnxtrain forks the
random generator and redirects stdout around them. So one capture runs at a time, and no onnxtrain module is called
in another thread meanwhile (a call waits for the capture; a capture waits for the calls under way in other
threads). A thread's own calls never wait for its own capture (the traced module may hold onnxtrain modules)."""

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
    """Held while a capture runs. The capturing thread's own calls step aside while it waits and captures (a
    capture happens inside a call, in FSDP2's unsharded parameters: two threads each inside a call and each
    waiting to capture would otherwise wait for each other); they are back when it ends."""
    global _capturing, _depth
    me = threading.get_ident()
    with _state:
        mine = _calls.pop(me, 0)
        _state.notify_all()
        while _capturing not in (None, me) or _calls:
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
            if mine:
                _calls[me] = mine
            _state.notify_all()
