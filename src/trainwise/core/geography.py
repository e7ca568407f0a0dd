"""The continent of a cloud region: the level of a network link between two machines (same
continent or not), and where hybrid groups and egress prices place a machine."""

from __future__ import annotations

CONTINENTS = ("us", "eu", "asia", "oce", "sa", "af")

_PREFIXES = (
    # (prefix or word, continent); checked in order on the lower-cased region name
    ("ap-southeast-2", "oce"), ("ap-southeast-4", "oce"), ("australia", "oce"), ("newzealand", "oce"),
    ("us-", "us"), ("us", "us"), ("ca-", "us"), ("canada", "us"), ("northamerica", "us"), ("mx-", "us"),
    ("mexico", "us"), ("eastus", "us"), ("westus", "us"), ("centralus", "us"), ("northcentralus", "us"),
    ("southcentralus", "us"), ("westcentralus", "us"),
    ("eu-", "eu"), ("europe", "eu"), ("uk", "eu"), ("france", "eu"), ("germany", "eu"), ("norway", "eu"),
    ("sweden", "eu"), ("switzerland", "eu"), ("poland", "eu"), ("italy", "eu"), ("spain", "eu"),
    ("northeurope", "eu"), ("westeurope", "eu"),
    ("ap-", "asia"), ("asia", "asia"), ("japan", "asia"), ("korea", "asia"), ("india", "asia"),
    ("centralindia", "asia"), ("southindia", "asia"), ("westindia", "asia"), ("eastasia", "asia"),
    ("southeastasia", "asia"), ("me-", "asia"), ("il-", "asia"), ("uae", "asia"), ("qatar", "asia"),
    ("israel", "asia"), ("me", "asia"),
    ("sa-", "sa"), ("southamerica", "sa"), ("brazil", "sa"), ("chile", "sa"),
    ("af-", "af"), ("africa", "af"), ("southafrica", "af"),
)


def continent_of(region: str | None) -> str | None:
    """The continent code of a cloud region name (AWS, GCP, Azure, Lambda spellings), or None."""
    if not isinstance(region, str) or not region:  # a catalog row without a region holds NaN
        return None
    name = region.strip().lower()
    for prefix, continent in _PREFIXES:
        if name.startswith(prefix):
            return continent
    return None
