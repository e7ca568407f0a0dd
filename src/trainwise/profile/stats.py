"""The iteration-time statistics moved to `trainwise.core.stats` (the Profile's `Measurement` is built
with them). This module keeps the old import path working."""

from trainwise.core.stats import (_T95, SpreadSummary, StabilityVerdict, detect_warmup,  # noqa: F401 - re-exported
                                  stability, summarise, t_quantile_95)
