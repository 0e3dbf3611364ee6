"""QSCH preemption control (paper 3.2.3): who may be evicted for whom, the one victim order,
the minimal victim search and the preemptor that runs it. See ``docs/qsch.md``.

The cycle reaches preemption through one call, :meth:`Preemption.preempt` (and, after each
preemption, :meth:`Preemption.spare_needless`, which gives back victims it made needless); a
user adds a rule through :class:`PreemptionPolicy` ``rules`` (:class:`kant.contracts.VictimRule`).
"""

from kant.preemption.candidates import VictimIndex, VictimRef, victim_order
from kant.preemption.policy import PreemptionPolicy
from kant.preemption.preemptor import Preemption
from kant.preemption.rules import Preemptor, VictimUnit, VictimView, builtin_reason
from kant.preemption.search import find_victims
from kant.preemption.whatif import CycleWhatIf

__all__ = [
    "CycleWhatIf",
    "Preemption",
    "PreemptionPolicy",
    "Preemptor",
    "VictimIndex",
    "VictimRef",
    "VictimUnit",
    "VictimView",
    "builtin_reason",
    "find_victims",
    "victim_order",
]
