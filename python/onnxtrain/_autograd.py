"""The bridge to PyTorch's autograd: one Function call per forward; backward runs the graph's backward part.
Tensors cross by DLPack, sharing their memory, in both directions and in every dtype.

Early gradients (Options.early_gradients, where something reads them early): backward runs in a thread of its own
and hands each parameter's gradient over as soon as it is final. Each parameter reaches the graph through a Release
node, chained on a 0-d token in the reverse of the order backward makes their gradients final; autograd runs them
one after the other, each waiting for its gradient, so each parameter's gradient is accumulated (and DDP's hook for
it fires, starting its all-reduce) while the rest of backward still runs."""

import threading

import torch


def as_input(t):
    return t.detach().contiguous()


class Handoff:
    """One backward call running in its own thread, and the gradients it has made final, by name."""

    def __init__(self, last):
        self.last = last  # the name whose gradient comes last: its Release ends the thread
        self.ready, self.result, self.error, self.done = {}, None, None, False
        self.changed = threading.Condition()
        self.thread = None

    def put(self, name, gradient):  # (from the backward thread)
        with self.changed:
            self.ready[name] = torch.from_dlpack(gradient)
            self.changed.notify_all()

    def start(self, backward):
        threads = torch.get_num_threads()  # (a new thread would start with OpenMP's default, all cores)

        def run():
            torch.set_num_threads(threads)
            try:
                self.result = backward(self.put)
            except BaseException as e:  # raised again where autograd waits
                self.error = e
            finally:
                with self.changed:
                    self.done = True
                    self.changed.notify_all()

        self.thread = threading.Thread(target=run, name="onnxtrain-backward", daemon=True)
        self.thread.start()

    def take(self, name):
        with self.changed:
            self.changed.wait_for(lambda: name in self.ready or self.done)
            gradient = self.ready.pop(name, None)
        if name == self.last or gradient is None:
            self.join()
        return gradient

    def join(self):
        """The backward call's result, handed over once: the handoff keeps no reference to it."""
        self.thread.join()
        if self.error is not None:
            raise self.error
        result, self.result = self.result, None
        return result


def early_gradients(option, parameters):
    """Whether to hand these parameters' gradients over as soon as they are final (Options.early_gradients: True,
    False, or None to decide): where something reads them before backward ends, a hook of torch.distributed's (DDP,
    FSDP2) or one registered on a parameter."""
    if option is not None:
        return option
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return True
    return any(p.requires_grad and (p._post_accumulate_grad_hooks or p._backward_hooks) for p in parameters)


class Release(torch.autograd.Function):
    """token -> a new token, with a parameter beside it; backward gives the parameter its gradient as soon as the
    backward thread has made it final."""

    @staticmethod
    def forward(ctx, handoff, name, token, parameter):
        ctx.handoff, ctx.name = handoff, name
        return token.new_zeros(())

    @staticmethod
    def backward(ctx, token_grad):
        return None, None, token_grad, ctx.handoff.take(ctx.name)

    @staticmethod
    def chain(held, names):
        """The chain over the parameters among `names` (in the order backward makes their gradients final):
        (handoff, token) to pass to Apply, and the names released; nothing to pass when none is a parameter."""
        names = [n for n in names if held[n].requires_grad]
        if not names:
            return None, None, set()
        handoff = Handoff(names[-1])
        token = torch.zeros(())
        for name in reversed(names):  # (the last made runs first in backward)
            token = Release.apply(handoff, name, token, held[name])
        return handoff, token, set(names)


class Apply(torch.autograd.Function):
    @staticmethod
    def forward(ctx, runner, handoff, token, *tensors):
        outs, state = runner.forward(tensors)
        ctx.runner, ctx.state, ctx.handoff = runner, state, handoff
        results = tuple(torch.from_dlpack(outs[name]) for name in runner.output_names)
        names = runner.output_names
        ctx.mark_non_differentiable(*[r for r, name in zip(results, names) if name not in runner.grad_outputs])
        # An output no loss reads gets no gradient (None, not zeros): the session skips what it would add where it
        # can (optional_grad_outputs), else backward makes the zeros.
        ctx.set_materialize_grads(False)
        ctx.output_meta = [(r.shape, r.dtype, r.device) for r in results]
        return results

    @staticmethod
    def backward(ctx, *grads):
        runner, state, handoff = ctx.runner, ctx.state, ctx.handoff
        # The stash goes as soon as backward is done, and the gradients with their last user: the graph's outputs
        # (the step's loss, often kept until the next step's) hold this node, and so would hold them.
        ctx.state = ctx.handoff = None
        output_grads = {}
        for name, g, (shape, dtype, device) in zip(runner.output_names, grads, ctx.output_meta):
            if name not in runner.grad_outputs or (g is None and name in runner.optional_grad_outputs):
                continue
            output_grads[name] = as_input(g) if g is not None else torch.zeros(shape, dtype=dtype, device=device)
        if handoff is None:
            result = runner.backward(state, output_grads)
            return (None, None, None, *[torch.from_dlpack(result[n]) if n in result else None
                                        for n in runner.feed_names])
        stream = runner.stream()  # (autograd's for this node: the backward thread's own would be the default)
        handoff.start(lambda on_gradient: runner.backward(state, output_grads, on_gradient, stream))
        # Inputs other than the released parameters get their gradients when all of backward is done.
        needs = [n for n, need in zip(runner.feed_names, ctx.needs_input_grad[3:]) if need]
        result = handoff.join() if needs else {}
        return (None, None, torch.zeros(()), *[torch.from_dlpack(result[n]) if n in needs and n in result else None
                                              for n in runner.feed_names])
