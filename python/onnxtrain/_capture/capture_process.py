"""A capture run in a child process forked for it. PyTorch's exporters leave their cost in the process that runs
them: the modules they import (torch._dynamo, torch.export, the ONNX exporter and its torchlib: about 66 MiB) and
what tracing caches (about 28 MiB more for a 6-layer GPT), none of it returned while the process lives. A forked
child sees the module exactly as it is, captures it, sends back the graph (which holds no weights) and exits: the
training process keeps none of that memory, and nothing the tracer does to the module, PyTorch's random generator
or process-wide state reaches it.

Forking is only safe where no other thread may hold a lock the child needs, and where the process holds no
connections a child would share: a capture runs in the calling process instead when other threads are running,
when torch.distributed or CUDA is initialized, where the system has no fork, or when Options.capture_process is off."""

import logging
import os
import pickle
import signal
import sys
import threading
import traceback

import torch

from onnxtrain import _onnxtrain as C

_in_child = False  # set in the child: a capture nested in a capture runs where it is


def usable():
    """Whether a capture may run in a forked child now (not once CUDA is initialized: a forked child cannot use it)."""
    distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
    return hasattr(os, "fork") and not _in_child and threading.active_count() == 1 and not distributed and \
        not torch.cuda.is_initialized()


def _portable(error):
    """`error` as it can cross to the parent, the child's traceback added as a note: itself where it pickles with
    its message intact, else a RuntimeError naming its type and message."""
    where = "".join(traceback.format_tb(error.__traceback__))
    error.add_note(f"(raised in the process capturing the module:)\n{where}")
    try:
        if str(pickle.loads(pickle.dumps(error))) == str(error):
            return error
    except Exception:  # noqa: BLE001 (whatever pickling raises, the error crosses as text)
        pass
    plain = RuntimeError(f"{type(error).__name__}: {error}")
    plain.__notes__ = error.__notes__
    return plain


def _collect_log_records(records):
    """Records that would reach a logger's handlers go to `records` instead, ready to cross to the parent, whose
    loggers handle them as if logged there."""

    def collect(logger, record):
        record.msg, record.args = record.getMessage(), None
        if record.exc_info:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
            record.exc_info = None
        try:
            pickle.dumps(record)  # (a record whose extra fields do not pickle stays in the child)
            records.append(record)
        except Exception:  # noqa: BLE001
            pass

    logging.Logger.callHandlers = collect


def _child(write_fd, fn, args):
    global _in_child
    _in_child = True
    status = 0
    try:
        torch.set_num_threads(1)  # the parent's OpenMP workers do not exist here
        records = []
        _collect_log_records(records)
        try:
            reply = ("value", fn(*args), records)
        except BaseException as e:  # noqa: BLE001 (every failure goes back to the parent)
            reply = ("error", _portable(e), records)
        try:
            data = pickle.dumps(reply)
        except Exception as e:
            data = pickle.dumps(("error", RuntimeError(f"the capture's result cannot be sent back: {e}"), []))
        with os.fdopen(write_fd, "wb") as pipe:
            pipe.write(data)
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:  # noqa: BLE001 (the parent reports an empty reply)
        status = 1
    finally:
        os._exit(status)  # no atexit handlers, no destructors of the parent's objects


def _ended(status):
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        return f"killed by signal {sig} ({signal.Signals(sig).name})"
    return f"exited with status {os.WEXITSTATUS(status)}"


def run(fn, *args):
    """fn(*args) in a forked child: its value, or its exception raised here."""
    sys.stdout.flush()  # (buffered output would otherwise be written by both processes)
    sys.stderr.flush()
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        _child(write_fd, fn, args)
    os.close(write_fd)
    try:
        with os.fdopen(read_fd, "rb") as pipe:
            data = pipe.read()
    except BaseException:  # (interrupted: the child goes too)
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        raise
    _, status = os.waitpid(pid, 0)
    if not data:
        raise C.Error(f"onnxtrain: the process capturing the module {_ended(status)} before it answered; "
                      "Options(capture_process=False) (ONNXTRAIN_CAPTURE_PROCESS=0) captures in this process")
    kind, value, records = pickle.loads(data)
    for record in records:
        logging.getLogger(record.name).handle(record)
    if kind == "error":
        raise value
    return value
