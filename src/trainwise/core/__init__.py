"""The bottom layer: types and constants every other trainwise package shares (the Profile, the
workload characterisation, catalog offerings, the cost model's constants and formulas, the
continent of a cloud region, iteration-time statistics).

It imports nothing from the other trainwise packages (only the leaf modules `trainwise.errors` and
`trainwise._io`), so any layer may import it; `.importlinter` enforces that. Importing this package
imports nothing: `trainwise.core.stats` runs inside the profiled process, where only the standard
library and torch can be assumed.
"""
