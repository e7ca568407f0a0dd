"""Moved to trainwise.agent.stats (the in-process agent's statistics); this path keeps working."""

from trainwise.agent.stats import (SpreadSummary, StabilityVerdict, detect_warmup, stability,  # noqa: F401
                                   summarise, t_quantile_95)
