"""QSCH admission control (paper 3.2.1 and 3.2.3): static quotas per tenant x GPU model,
the dynamic readiness check, and preemption (who may be a victim, and the minimal victim
search). See ``docs/qsch.md``."""

from kant.admission.preemption import (
    PreemptionPolicy,
    Preemptor,
    VictimUnit,
    WhatIf,
    find_victims,
    victim_reason,
)
from kant.admission.quota import (
    Admitter,
    Quota,
    QuotaDecision,
    QuotaLedger,
    QuotaMode,
    QuotaTable,
    admit_quota,
)
from kant.admission.readiness import PoolFacts, readiness

__all__ = [
    "Admitter",
    "PoolFacts",
    "PreemptionPolicy",
    "Preemptor",
    "Quota",
    "QuotaDecision",
    "QuotaLedger",
    "QuotaMode",
    "QuotaTable",
    "VictimUnit",
    "WhatIf",
    "admit_quota",
    "find_victims",
    "readiness",
    "victim_reason",
]
