"""The progress display: on stderr while a phase runs, never when stderr is not a terminal or with
--quiet, and never in stdout."""

from __future__ import annotations

import io
import sys

from trainwise import _progress


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_phase_shows_on_a_terminal_stderr_only(monkeypatch):
    err = _Terminal()
    monkeypatch.setattr(sys, "stderr", err)
    monkeypatch.delenv(_progress.QUIET_ENV, raising=False)
    _progress.set_quiet(False)
    assert _progress.enabled()
    with _progress.phase("profiling the default workload"):
        pass
    assert "profiling the default workload" in err.getvalue()


def test_phase_is_silent_when_not_a_terminal_or_quiet(monkeypatch, capsys):
    with _progress.phase("ranking candidates"):  # pytest's captured stderr is not a terminal
        pass
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""
    err = _Terminal()
    monkeypatch.setattr(sys, "stderr", err)
    _progress.set_quiet(True)
    try:
        with _progress.phase("ranking candidates"):
            pass
        assert err.getvalue() == "" and not _progress.enabled()
    finally:
        _progress.set_quiet(False)
    monkeypatch.setenv(_progress.QUIET_ENV, "1")
    assert not _progress.enabled()


def test_quiet_is_a_global_option():
    from trainwise.cli import main

    assert main(["--quiet", "workloads"]) == 0
    _progress.set_quiet(False)
