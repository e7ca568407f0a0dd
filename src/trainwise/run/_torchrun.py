"""torchrun (`torch.distributed.run`), without the tracebacks it prints when trainwise stops a job.

`trainwise run --engine ddp` stops a job on a preemption notice or Ctrl-C by sending SIGTERM to torchrun's
process group: the workers checkpoint and exit 143, and torchrun's agent raises a SignalException whose
traceback, printed over the run's summary, read like a crash. Here that exception is the exit status a
process stopped by the signal has (128 + signal).

A preemption notice may reach only some workers (one node of several is preempted; trainwise run on
the other node was not signalled): the ranks still stop together at the step they agree on, checkpoint and
exit 143, and torchrun, not signalled itself, reported a ChildFailedError (a traceback; exit 1, "failed").
Workers that all exited 143 were stopped by SIGTERM: so is torchrun (143).

A worker that cannot resume from the checkpoint (another model, another number of processes) says why in
one line and exits with trainwise's code for it (trainwise.run._child.RESUME_MISMATCH_EXIT,
RESUME_SKIP_FAILED_EXIT); torchrun would wrap that in its ChildFailedError report (a traceback, "exited with
code 1"): here its status is the worker's code, which trainwise turns into its one-line error. Everything
else (a worker's own failure report included) is torchrun's.
"""

from __future__ import annotations

import logging
import sys

# trainwise.run._child.RESUME_MISMATCH_EXIT, RESUME_SKIP_FAILED_EXIT and CHECKPOINT_WRITE_EXIT (not imported: _child arms a recorder)
TRAINWISE_EXITS = (75, 76, 77)
# A worker that checkpointed and stopped on SIGTERM (with the other ranks, at the step they agreed on).
STOPPED_EXIT = 143


class _QuietTrainwiseExit(logging.Filter):
    """Drops the elastic agent's "failed (exitcode: 75) local_rank: …" line for trainwise's own codes."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (str(record.msg).startswith("failed (exitcode:") and record.args
                    and record.args[0] in (*TRAINWISE_EXITS, STOPPED_EXIT))


def main(argv: list[str] | None = None) -> None:
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import main as torchrun_main

    logging.getLogger("torch.distributed.elastic.multiprocessing.api").addFilter(_QuietTrainwiseExit())
    try:
        torchrun_main(sys.argv[1:] if argv is None else argv)
    except SignalException as exc:
        sys.exit(128 + int(exc.sigval))
    except ChildFailedError as exc:
        codes = {f.exitcode for f in exc.failures.values()}
        own = sorted(codes & set(TRAINWISE_EXITS))
        if own:
            sys.exit(own[0])
        if codes == {STOPPED_EXIT}:
            sys.exit(STOPPED_EXIT)
        raise


if __name__ == "__main__":
    main()
