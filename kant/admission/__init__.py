"""QSCH admission control (paper 3.2.1): static quotas per tenant x GPU model, the node pools
a cycle sees, the dynamic readiness check, holds and start-time forecasts. Preemption is its
own package, :mod:`kant.preemption`. See ``docs/qsch.md``."""

from kant.admission.holds import Hold
from kant.admission.pools import Pools, restricted
from kant.admission.quota import (
    Admitter,
    Quota,
    QuotaDecision,
    QuotaLedger,
    QuotaMode,
    QuotaTable,
    admit_quota,
    admit_without_quotas,
)
from kant.admission.readiness import PoolFacts, readiness

__all__ = [
    "Admitter",
    "Hold",
    "PoolFacts",
    "Pools",
    "Quota",
    "QuotaDecision",
    "QuotaLedger",
    "QuotaMode",
    "QuotaTable",
    "admit_quota",
    "admit_without_quotas",
    "readiness",
    "restricted",
]
