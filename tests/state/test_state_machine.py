"""Hypothesis stateful test: random add / remove / bind / release / health changes (on nodes
with and without a pod limit, ``max_pods``, changed in place too),
interleaved with snapshots and rolled-back transactions, keep ``check_invariants`` passing,
every snapshot equals a fresh full rebuild of the state at that moment, and the snapshot's
change log names every row that changed since a reader last looked; a snapshot that shows a
content version seen before holds what it held then; the GPU milli held per device
(``held_milli``, what GAR and GFR read) is what the bindings hold."""

from __future__ import annotations

import contextlib
from typing import Any

import hypothesis.strategies as st
import numpy as np
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from kant.errors import AllocationConflictError, DuplicateError, UnknownNodeError
from kant.metrics import held_milli
from kant.model import MILLI, Binding, PodId
from kant.state import ClusterState, Snapshot
from kant.testing import check_invariants, node

NAMES = [f"n{i}" for i in range(6)]
LEAVES = ["lf0", "lf1", "lf2"]


class StateMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.st = ClusterState()
        self.seq = 0
        self.added = 0
        # a change-log reader: snapshot token, log position and the rows it last saw
        self.seen: tuple[int, int, list[Any]] | None = None
        # what each content version a snapshot showed named: its rows and aggregates
        self.contents: dict[int, tuple[Any, ...]] = {}
        # node -> its pods when its max_pods last changed in place (they stay, above it too)
        self.over: dict[str, int] = {}

    # ------------------------------------------------------------- nodes

    @rule(
        name=st.sampled_from(NAMES),
        leaf=st.sampled_from(LEAVES),
        gpus=st.sampled_from([0, 2, 8]),
        max_pods=st.sampled_from([None, None, 0, 1, 2, 3]),
    )
    def add_node(self, name: str, leaf: str, gpus: int, max_pods: int | None) -> None:
        spec = node(
            name,
            gpus=gpus,
            max_pods=max_pods,
            leaf=leaf,
            spine=f"sp-{leaf}",
            superspine="ss0",
            model="H100" if gpus == 8 else "T4",
            cpu_milli=16000,
            memory_mib=64000,
        )
        if name in self.st:
            gen = self.st.generation
            try:
                self.st.add_node(spec)
            except DuplicateError:
                assert self.st.generation == gen
                return
            raise AssertionError("duplicate node accepted")
        self.st.add_node(spec)

    @precondition(lambda self: len(self.st) > 0)
    @rule(data=st.data())
    def remove_node(self, data: st.DataObject) -> None:
        name = data.draw(st.sampled_from(sorted(n.name for n in self.st.nodes())))
        pods = set(self.st.pods_on(name))
        lost = self.st.remove_node(name)
        self.over.pop(name, None)
        assert {b.pod for b in lost} == pods

    @precondition(lambda self: len(self.st) > 0)
    @rule(data=st.data(), max_pods=st.sampled_from([None, 0, 1, 2, 3]))
    def set_max_pods(self, data: st.DataObject, max_pods: int | None) -> None:
        """A pod capacity changed in place: the pods there stay (above a lowered one too)."""
        name = data.draw(st.sampled_from(sorted(n.name for n in self.st.nodes())))
        pods = set(self.st.pods_on(name))
        self.st.set_max_pods(name, max_pods)
        assert set(self.st.pods_on(name)) == pods and self.st.node(name).max_pods == max_pods
        self.over[name] = len(pods)

    @precondition(lambda self: len(self.st) > 0)
    @rule(data=st.data(), healthy=st.booleans())
    def node_health(self, data: st.DataObject, healthy: bool) -> None:
        name = data.draw(st.sampled_from(sorted(n.name for n in self.st.nodes())))
        self.st.set_node_health(name, healthy)

    @precondition(lambda self: any(n.gpus for n in self.st.nodes()))
    @rule(data=st.data(), healthy=st.booleans())
    def gpu_health(self, data: st.DataObject, healthy: bool) -> None:
        spec = data.draw(st.sampled_from([n for n in self.st.nodes() if n.gpus]))
        gpu = data.draw(st.integers(0, spec.gpus - 1))
        self.st.set_gpu_health(spec.name, gpu, healthy)

    # ------------------------------------------------------------- pods

    @precondition(lambda self: len(self.st) > 0)
    @rule(data=st.data())
    def bind(self, data: st.DataObject) -> None:
        """Bind anything at all; the state must accept exactly the feasible bindings."""
        spec = data.draw(st.sampled_from(list(self.st.nodes())))
        gpus: tuple[int, ...] = ()
        milli = MILLI
        if spec.gpus:
            k = data.draw(st.integers(0, min(spec.gpus, 3)))
            gpus = tuple(data.draw(st.permutations(range(spec.gpus)))[:k])
            if k == 1 and data.draw(st.booleans()):
                milli = data.draw(st.sampled_from([100, 250, 500, 999]))
        nics = (
            tuple(data.draw(st.sets(st.integers(0, max(spec.rdma_nics - 1, 0)), max_size=2)))
            if spec.rdma_nics
            else ()
        )
        self.seq += 1
        b = Binding(
            pod=PodId(job=f"j{self.seq}", role="w", index=0),
            node=spec.name,
            gpus=gpus,
            gpu_milli=milli,
            nics=nics,
            cpu_milli=data.draw(st.sampled_from([0, 1000, 9000])),
            memory_mib=1000,
        )
        snap_before = self.st.full_snapshot()
        try:
            self.st.check_binding(b)
            feasible = True
        except (AllocationConflictError, UnknownNodeError):
            feasible = False
        if feasible:
            self.st.bind(b)
        else:
            try:
                self.st.bind(b)
            except (AllocationConflictError, UnknownNodeError):
                assert self.st.full_snapshot().same_as(snap_before) == []
            else:
                raise AssertionError("infeasible binding accepted")

    @precondition(lambda self: self.st.num_pods > 0)
    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        b = data.draw(st.sampled_from(list(self.st.pods())))
        assert self.st.release(b.pod) == b

    # ------------------------------------------------------------- snapshots

    @rule()
    def snapshot_equals_full_rebuild(self) -> None:
        snap = self.st.snapshot()
        check_invariants(snap)
        assert snap.same_as(self.st.full_snapshot()) == []
        self._log_names_every_change(snap)

    def _log_names_every_change(self, snap: Snapshot) -> None:
        """Every row that differs from what the reader saw last is in the change log since
        then (unless the log says it cannot tell)."""
        n = snap.num_slots
        rows = [snap.cols.row(s) for s in range(n)]
        if self.seen is not None and self.seen[0] == snap.token:
            _token, position, before = self.seen
            logged = snap.rows_changed_since(position)
            if logged is not None:
                named = set(logged.tolist())
                for s in range(n):
                    if s >= len(before) or not _same_row(rows[s], before[s]):
                        assert s in named, f"slot {s} changed but is not in the change log"
        self.seen = (snap.token, snap.log_position, rows)
        self._same_version_same_content(snap, rows)

    def _same_version_same_content(self, snap: Snapshot, rows: list[Any]) -> None:
        """A content version seen before names the same rows, names and aggregates."""
        now = (
            tuple((r[:-1], _trimmed(r[-1].tolist())) for r in rows),
            tuple(snap.names),
            tuple(_trimmed(snap.agg[lv].tolist()) for lv in sorted(snap.agg)),
        )
        seen = self.contents.setdefault(snap.content_version, now)
        assert seen == now, f"content version {snap.content_version} names two contents"

    @precondition(lambda self: len(self.st) > 0)
    @rule(data=st.data(), commit_inner=st.booleans())
    def rolled_back_transaction_changes_nothing(
        self, data: st.DataObject, commit_inner: bool
    ) -> None:
        snap = self.st.snapshot()
        reference = self.st.full_snapshot()
        with snap.transaction():
            for _ in range(data.draw(st.integers(1, 4))):
                self._tentative(snap, data)
            self._log_names_every_change(snap)
            with snap.transaction() as inner:
                self._tentative(snap, data)
                self._log_names_every_change(snap)
                if commit_inner:
                    inner.commit()
            check_invariants(snap)
            self._log_names_every_change(snap)
        assert snap.same_as(reference) == []
        self._log_names_every_change(snap)

    @precondition(lambda self: len(self.st) > 0)
    @rule(data=st.data())
    def committed_transaction_then_refresh_restores_truth(self, data: st.DataObject) -> None:
        snap = self.st.snapshot()
        with snap.transaction() as tx:
            self._tentative(snap, data)
            tx.commit()
        check_invariants(snap)
        assert self.st.snapshot().same_as(self.st.full_snapshot()) == []

    def _tentative(self, snap: Any, data: st.DataObject) -> None:
        slots = [self.st.slot_of(n.name) for n in self.st.nodes()]
        s = data.draw(st.sampled_from(slots))
        free = int(snap.free_mask[s])
        mask = data.draw(st.integers(0, free)) & free
        pods = data.draw(st.integers(0, 2))
        with contextlib.suppress(AllocationConflictError):
            snap.allocate(s, mask, MILLI, 0, 0, 0, pods)
        if data.draw(st.booleans()):
            gpus = data.draw(st.integers(0, (1 << int(snap.gpus[s])) - 1))
            before = snap.content_version
            try:
                snap.release(s, gpus, 250, 0, 0, 0, data.draw(st.integers(0, 2)))
            except AllocationConflictError:  # (a GPU would have more than MILLI free)
                assert snap.content_version == before  # refused, changing nothing

    @invariant()
    def state_is_consistent(self) -> None:
        check_invariants(self.st)

    @invariant()
    def no_node_runs_more_pods_than_its_max_pods(self) -> None:
        for spec in self.st.nodes():
            if spec.max_pods is not None:
                over = self.over.get(spec.name, 0)
                assert len(self.st.pods_on(spec.name)) <= max(spec.max_pods, over)

    @invariant()
    def held_milli_is_what_the_bindings_hold(self) -> None:
        held = held_milli(self.st)
        want = np.zeros_like(held)
        for b in self.st.pods():
            for g in b.gpus:
                want[self.st.slot_of(b.node), g] += b.gpu_milli
        assert (held == want).all()


def _same_row(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    """Rows of :meth:`NodeColumns.row`: scalars, then the free milli per GPU (the GPU
    columns may have grown since: compare the common width, the rest must be 0)."""
    if a[:-1] != b[:-1]:
        return False
    ga, gb = a[-1], b[-1]
    w = min(len(ga), len(gb))
    return bool((ga[:w] == gb[:w]).all() and not ga[w:].any() and not gb[w:].any())


def _trimmed(values: list[Any]) -> tuple[Any, ...]:
    """``values`` (numbers, or rows of numbers) without the trailing zeros or rows of
    zeros: columns and aggregates grow with zeros, which changes no content."""
    out = [tuple(v) if isinstance(v, list) else v for v in values]
    while out and not (any(out[-1]) if isinstance(out[-1], tuple) else out[-1]):
        out.pop()
    return tuple(out)


TestClusterStateMachine = StateMachine.TestCase
TestClusterStateMachine.settings = settings(
    max_examples=60,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
