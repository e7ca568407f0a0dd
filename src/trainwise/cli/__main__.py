"""`python -m trainwise.cli`: the same entry point as the `trainwise` console script."""

from trainwise.cli import run

run()
