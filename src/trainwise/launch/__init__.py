"""Launch: a saved plan turned into a running job — a SkyPilot task (any cloud SkyPilot supports)
or the local backend (this machine, end to end) — the automated profiling sweep, data staging,
model persistence and the run history that feeds predictions back to `trainwise plan --history`."""
