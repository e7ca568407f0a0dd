"""torchrun (`torch.distributed.run`), without the traceback it prints when trainwise forwards a SIGTERM.

`trainwise run --engine ddp` stops a job on a preemption notice or Ctrl-C by sending SIGTERM to torchrun's
process group: the workers checkpoint and exit 143, and torchrun's agent raises a SignalException whose
traceback, printed over the run's summary, read like a crash. Here that exception is the exit status a
process stopped by the signal has (128 + signal); everything else (a worker's failure report included)
is torchrun's own.
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> None:
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.run import main as torchrun_main

    try:
        torchrun_main(sys.argv[1:] if argv is None else argv)
    except SignalException as exc:
        sys.exit(128 + int(exc.sigval))


if __name__ == "__main__":
    main()
