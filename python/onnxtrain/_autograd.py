"""The bridge to PyTorch's autograd: one Function call per forward; backward runs the graph's backward part.
Tensors cross by DLPack, sharing their memory, in both directions and in every dtype."""

import torch


def as_input(t):
    return t.detach().contiguous()


class Apply(torch.autograd.Function):
    @staticmethod
    def forward(ctx, runner, *tensors):
        outs, state = runner.forward(tensors)
        ctx.runner, ctx.state = runner, state
        results = tuple(torch.from_dlpack(outs[name]) for name in runner.output_names)
        names = runner.output_names
        ctx.mark_non_differentiable(*[r for r, name in zip(results, names) if name not in runner.grad_outputs])
        return results

    @staticmethod
    def backward(ctx, *grads):
        runner, state = ctx.runner, ctx.state
        ctx.state = None  # the stash goes as soon as backward is done
        output_grads = {name: as_input(g) for name, g in zip(runner.output_names, grads) if name in runner.grad_outputs}
        result = runner.backward(state, output_grads)
        return (None, *[torch.from_dlpack(result[n]) if n in result else None for n in runner.feed_names])
