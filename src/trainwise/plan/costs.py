"""The cost model moved to `trainwise.core.costs` (run, pipeline and plan all use it; it imports
nothing above `core`). This module keeps the old import path working."""

from trainwise.core.costs import (CHECKPOINT_FIXED_S, CHECKPOINT_WRITE_BYTES_PER_S,  # noqa: F401 - re-exported
                                  DEFAULT_INTERRUPTIONS_PER_HOUR, DEFAULT_PROVISIONING_S,
                                  DEFAULT_STAGING_BYTES_PER_S, DEFAULT_STORAGE_USD_PER_GB_MONTH, GRANULARITY_S,
                                  HOURS_PER_30_DAYS, INTERRUPTION_SOURCE, PROVISIONING_SOURCE, SECONDS_PER_MONTH,
                                  STAGING_SOURCE, STORAGE_SOURCE, _granularity, billed_seconds, checkpoint_write_s,
                                  compute_cost, cost_per_training, egress_cost, elastic_runtime_s,
                                  rate_from_30day_frequency, spot_expectation, staging_seconds, storage_cost,
                                  training_state_bytes, young_daly_interval_s)
