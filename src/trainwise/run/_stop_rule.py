"""`trainwise run`'s checkpointer and SIGTERM handling, as a subscriber of the agent's bus: at each iteration
boundary it writes a checkpoint when one is due, and after a SIGTERM it writes one (if anything trained
since the last) and ends the job with 143, the code a spot orchestrator reads as "stopped"."""

from __future__ import annotations

from collections.abc import Callable

from trainwise.agent.events import Event, IterationBoundary, SigtermReceived

SIGTERM_EXIT = 143


class CheckpointAndStop:
    """Subscriber (strict: a checkpoint that cannot be written fails the job, loudly).

    `due()`: an interval checkpoint is due; `save(reason)`: write one; `exit(code)`: end the process (does not
    return in the job); `started()`: a training pass has begun (before it, a SIGTERM has nothing to save);
    `new_batches()`: batches were trained since the last checkpoint; `writes`: this process writes checkpoints
    (rank 0); `coordinated()`: DDP ranks agree on stopping through the all-reduce (which carries
    `sigterm_pending`), and `ddp_boundary()` acts on what they agreed."""

    def __init__(self, *, due: Callable[[], bool], save: Callable[[str], None], exit: Callable[[int], None],
                 started: Callable[[], bool], new_batches: Callable[[], bool], writes: bool,
                 coordinated: Callable[[], bool] = lambda: False,
                 ddp_boundary: Callable[[], None] = lambda: None) -> None:
        self.due, self.save, self.exit, self.started, self.new_batches = due, save, exit, started, new_batches
        self.writes, self.coordinated, self.ddp_boundary = writes, coordinated, ddp_boundary
        self.sigterm_pending = False

    def __call__(self, event: Event) -> None:
        if isinstance(event, SigtermReceived):
            if not self.started():
                self.exit(SIGTERM_EXIT)  # nothing trained yet: nothing to save
                return
            self.sigterm_pending = True
        elif isinstance(event, IterationBoundary):
            self.boundary()

    def boundary(self) -> None:
        if self.coordinated():
            self.ddp_boundary()
            return
        if self.sigterm_pending:
            if self.writes and self.new_batches():
                self.save("sigterm")
            self.exit(SIGTERM_EXIT)
            return
        if self.writes and self.due():
            self.save("interval")
