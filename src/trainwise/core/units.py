"""Quantities in words, the same everywhere a number is shown (terminal tables, reports, commands)."""

from __future__ import annotations


def format_duration(seconds: float) -> str:
    if seconds < 1:
        return f"{seconds * 1000:.1f} ms"
    if seconds < 120:
        return f"{seconds:.2f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    hours = seconds / 3600
    return f"{hours:.2f} h" if hours < 100 else f"{hours:,.0f} h"  # "7,398 h", not "7397.58 h"
