"""Training iterations of a loop without an optimizer object: seen from autograd.

A script that updates its parameters by hand (`p.data.add_(p.grad, alpha=-lr)`) never calls
Optimizer.step, but every iteration runs one backward pass that reaches the model's parameters. When
no optimizer exists, each such backward ends an iteration; when one exists, its steps delimit iterations
(an LBFGS closure runs many forward/backward passes inside one step, a GAN steps two optimizers per
iteration) and backward passes count for nothing, unless many go by without a single step.
"""

from __future__ import annotations

from typing import Any

from trainwise.agent.events import UNSUBSCRIBE, BackwardEnd, Event, OptimizerBuilt, OptimizerStep

# Backward passes without any optimizer step after which an optimizer that exists is taken not to be the
# loop's (built for a scheduler, or unused): far more than any gradient accumulation of these scripts.
BACKWARDS_BEFORE_GIVING_UP_ON_OPTIMIZER = 64
# Graph nodes visited looking for a parameter: a loss's last layer is a few nodes from its root.
MAX_NODES_VISITED = 4096


def reaches_parameters(tensors: Any) -> bool:
    """Whether the autograd graph of `tensors` (a tensor or a sequence) reaches a trainable leaf that is
    an nn.Parameter (or any leaf requiring grad when torch.nn is not at hand)."""
    import torch

    roots = [tensors] if isinstance(tensors, torch.Tensor) else list(tensors or ())
    return graph_reaches_parameter([t.grad_fn for t in roots if isinstance(t, torch.Tensor) and t.grad_fn is not None],
                                   torch.nn.Parameter)


def graph_reaches_parameter(grad_fns: list[Any], parameter_type: type) -> bool:
    """Walk autograd nodes from `grad_fns` to an AccumulateGrad node whose leaf is a trainable parameter.

    Visited nodes are kept alive while walking: some torch releases (2.11) hand out a new Python wrapper
    for a node on each access, and a freed wrapper's id() is soon reused, so ids alone would skip nodes
    never visited (the whole graph, in a hand-written LSTM language model's loop)."""
    stack, visited = list(grad_fns), {}
    while stack and len(visited) < MAX_NODES_VISITED:
        node = stack.pop()
        if node is None or id(node) in visited:
            continue
        visited[id(node)] = node
        variable = getattr(node, "variable", None)  # AccumulateGrad: the leaf it accumulates into
        if variable is not None and isinstance(variable, parameter_type) and variable.requires_grad:
            return True
        stack.extend(next_node for next_node, _ in getattr(node, "next_functions", ()))
    return False


class BackwardIterations:
    """Subscriber: decides whether backward passes delimit iterations, and says when one ends.

    `on_iteration(t_s)` is called at the end of each backward pass that is an iteration boundary.
    Iteration k then spans the parameter update of k-1, the forward and the backward of k: the same
    period as update-to-update, so the mean iteration time is unchanged."""

    event_types = (OptimizerBuilt, OptimizerStep, BackwardEnd)  # what the bus hands it

    def __init__(self, on_iteration) -> None:
        self.on_iteration = on_iteration
        self.optimizers_built = 0
        self.optimizer_steps = 0
        self.backwards_without_step = 0
        self.active = False  # backward passes delimit iterations in this process

    def __call__(self, event: Event) -> object:
        if isinstance(event, OptimizerBuilt):
            self.optimizers_built += 1
        elif isinstance(event, OptimizerStep):
            # An optimizer steps: its steps end the iterations from now on, and backward passes decide nothing
            # more (off the bus: its every step would cost the job a call)
            self.optimizer_steps += 1
            self.active = False
            return UNSUBSCRIBE
        elif isinstance(event, BackwardEnd) and event.reaches_parameters and self.optimizer_steps == 0:
            self.backwards_without_step += 1
            if not self.active and (self.optimizers_built == 0
                                    or self.backwards_without_step >= BACKWARDS_BEFORE_GIVING_UP_ON_OPTIMIZER):
                self.active = True
            if self.active:
                self.on_iteration(event.t_s)
