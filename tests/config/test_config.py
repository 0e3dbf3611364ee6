"""The YAML config file: every part built from it, every mistake named by its key path."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kant.admission import QuotaMode
from kant.config import load_config, load_config_text, parse_config
from kant.errors import InvalidConfigError, InvalidConfigFileError, ValidationError
from kant.registry import BuildContext
from kant.testing import ClusterBuilder, job

FULL = """
defaultMode: shared
tenants:
  - name: team-a
    quotas:
      H100: {nominalQuota: 16, borrowingLimit: 8, lendingLimit: 4}
      A100: {nominalQuota: "500m"}
  - name: team-b
    mode: isolated
    quotas:
      H100: {nominalQuota: 8}
queueing:
  policy: backfill
  options: {threshold: 600}
  order: larger-first
  requeuing: {backoffBaseSeconds: 5, backoffFactor: 3, backoffMaxSeconds: 60, backoffLimitCount: 2}
placement:
  strategy: espread
  groupProbe: 2
preemption:
  priority: false
  reclaim: true
  backfill: true
  minRuntimeSeconds: 30
  maxSearchesPerCycle: null
kubernetes:
  schedulerName: kant
  anything: [1, 2]
"""


def test_a_full_config_sets_every_part_of_the_scheduler() -> None:
    cfg = load_config_text(FULL, source="kant.yaml")
    qs = {(q.tenant, q.gpu_model): q for q in cfg.quotas or ()}
    assert qs["team-a", "H100"].nominal == 16_000
    assert qs["team-a", "H100"].borrowing_limit == 8_000
    assert qs["team-a", "H100"].lending_limit == 4_000
    assert qs["team-a", "A100"].nominal == 500
    s = cfg.scheduler(ClusterBuilder().leaf("lf0", nodes=2).build())
    assert s.admitter.table.mode("team-b") is QuotaMode.ISOLATED
    assert s.admitter.table.mode("team-a") is QuotaMode.SHARED
    assert s.policy.name == "backfill" and s.policy.threshold == 600  # type: ignore[attr-defined]
    assert s.queue.backoff.base == 5 and s.queue.backoff.max_retries == 2
    assert s.placer.hooks.name == "espread" and s.placer.group_probe == 2
    assert s.preemption.priority is False and s.preemption.min_runtime == 30
    assert s.preemption.max_searches_per_cycle is None
    assert cfg.kubernetes == {"schedulerName": "kant", "anything": [1, 2]}


def test_the_preemption_options_users_of_the_peers_expect_are_set_by_the_file() -> None:
    # (the library had them, PreemptionPolicy(borrow_within_cohort=..., cascade_window=...),
    # but the file, the only way to set up the Kubernetes shim, refused them as unknown keys)
    cfg = load_config_text(
        "preemption:\n  borrowWithinCohort: true\n  borrowPriorityThreshold: -1\n"
        "  reclaimOthersFirst: false\n  cascadeWindowSeconds: 0\n"
    )
    p = cfg.scheduler(ClusterBuilder().leaf("lf0", nodes=1).build()).preemption
    assert p.borrow_within_cohort is True and p.borrow_priority_threshold == -1
    assert p.reclaim_others_first is False and p.cascade_window == 0
    never = load_config_text("preemption: {cascadeWindowSeconds: .inf}").preemption
    assert never.cascade_window == float("inf")
    default = load_config_text("").preemption
    assert (default.borrow_within_cohort, default.borrow_priority_threshold) == (False, None)
    assert default.reclaim_others_first is True and default.cascade_window == 3600


def test_a_job_evicted_by_preemption_preempts_at_once_with_a_cascade_window_of_zero_in_the_file() -> (
    None
):
    # lo (A100), mid (any model, priority 5), hi (H100, priority 10), as in docs/qsch.md's
    # options table: with the window the file sets to 0, mid evicts lo in the cycle hi starts
    cluster = ClusterBuilder().leaf("h", nodes=1, model="H100").leaf("a", nodes=1, model="A100")
    s = load_config_text("preemption: {cascadeWindowSeconds: 0}").scheduler(cluster.build())
    s.submit(job("lo", gpus=8, models="A100"), now=0)
    s.submit(job("mid", gpus=8, priority=5, models="H100|A100"), now=0)
    s.step(now=0)
    s.submit(job("hi", gpus=8, priority=10, models="H100", submitted_at=1), now=1)
    r = s.step(now=1)
    assert [v.job for v in r.victims] == ["mid"]
    for v in r.victims:
        for p in v.pods:
            s.pod_evicted(p, now=2)
    r = s.step(now=3)
    assert r.placed == ("hi",) and [v.job for v in r.victims] == ["lo"]


def test_a_victim_requeued_as_of_its_eviction_is_set_by_the_file() -> None:
    # Queue(requeue_timestamp="eviction"), Kueue's requeuingStrategy.timestamp: Eviction,
    # was refused as an unknown key. One node: v runs, w waits, p (priority 5) evicts v.
    for timestamp, order in (("submission", ["p", "v", "w"]), ("eviction", ["p", "w", "v"])):
        cfg = load_config_text(f"queueing: {{requeuing: {{timestamp: {timestamp}}}}}")
        s = cfg.scheduler(ClusterBuilder().leaf("lf0", nodes=1).build())
        s.submit(job("v", gpus=8), now=0)
        s.step(now=0)
        s.submit(job("w", gpus=8, submitted_at=1), now=1)
        s.submit(job("p", gpus=8, priority=5, submitted_at=2), now=2)
        r = s.step(now=2)
        for v in r.victims:
            for p in v.pods:
                s.pod_evicted(p, now=3)
        assert [e.id for e in s.queue.candidates()] == order
    assert load_config_text("").queue().requeue_timestamp == "submission"
    # (as policy names, in any case: Kueue writes Eviction)
    kueue = load_config_text("queueing: {requeuing: {timestamp: Eviction}}")
    assert kueue.queue().requeue_timestamp == "eviction"


def test_an_empty_config_is_the_library_defaults_with_no_quota_check() -> None:
    cfg = load_config_text("")
    assert cfg.tenants is None and cfg.quotas is None
    s = cfg.scheduler(ClusterBuilder().leaf("lf0", nodes=1).build())
    assert s.admitter.table.unlimited
    assert s.policy.name == "best-effort-fifo"
    s.submit(job("a", gpus=8), now=0)
    assert len(s.step(now=1).bindings) == 1


@pytest.mark.parametrize(
    ("text", "path"),
    [
        (
            "tenants:\n  - name: a\n  - name: b\n  - name: c\n    quotas:\n      A100: {nominalQuota: -1}\n",
            "tenants[2].quotas.A100.nominalQuota",
        ),
        (
            "tenants:\n  - name: a\n    quotas:\n      A100: {nominalQuota: 1, lendingLimit: 2}\n",
            "tenants[0].quotas.A100.lendingLimit",
        ),
        (
            "tenants:\n  - name: a\n    quotas:\n      A100: {nominalquota: 1}\n",
            "tenants[0].quotas.A100.nominalquota",
        ),
        (
            "tenants:\n  - name: a\n    quotas:\n      A100: {borrowingLimit: 1}\n",
            "tenants[0].quotas.A100.nominalQuota",
        ),
        # Kueue refuses both on a ClusterQueue without a cohort; kant took them and ignored them
        (
            "tenants:\n  - name: a\n    mode: isolated\n    quotas:\n      A100: {nominalQuota: 8, borrowingLimit: 16}\n",
            "tenants[0].quotas.A100.borrowingLimit",
        ),
        (
            "defaultMode: isolated\ntenants:\n  - name: a\n  - name: b\n    quotas:\n      A100: {nominalQuota: 8, lendingLimit: 4}\n",
            "tenants[1].quotas.A100.lendingLimit",
        ),
        ("tenants:\n  - name: a\n  - name: a\n", "tenants[1].name"),
        ("tenants:\n  - name: a\n    mode: private\n", "tenants[0].mode"),
        ("queueing: {policy: fifo}\n", "queueing.policy"),
        ("queueing: {policy: backfill, options: {thresold: 5}}\n", "queueing.options"),
        ("queueing: {policy: backfill, options: {threshold: -5}}\n", "queueing.options"),
        ("queueing: {requeuing: {backoffFactor: 0.5}}\n", "queueing.requeuing.backoffFactor"),
        ("placement: {strategy: tetris}\n", "placement.strategy"),
        ("placement: {groupProbe: 0}\n", "placement.groupProbe"),
        # numpy's generator refused it with a bare ValueError: the CLI printed a traceback
        ("placement: {strategy: random, options: {seed: -1}}\n", "placement.options"),
        ("placement: {strategy: firstfit, options: {seed: -3}}\n", "placement.options"),
        # read by truth value, "false" and "no" turned the option on
        ("placement: {strategy: fgdpp, options: {scarcity: 'false'}}\n", "placement.options"),
        ("placement: {strategy: fgdpp, options: {in_use: 'no'}}\n", "placement.options"),
        ("placement: {strategy: fgdpp, options: {cpu_share: 0}}\n", "placement.options"),
        ("preemption: {priority: 'yes'}\n", "preemption.priority"),
        ("preemption: {maxCandidates: 0}\n", "preemption.maxCandidates"),
        ("queueing: {requeuing: {timestamp: creation}}\n", "queueing.requeuing.timestamp"),
        ("queueing: {requeuing: {timestamp: 1}}\n", "queueing.requeuing.timestamp"),
        ("preemption: {borrowWithinCohort: 'yes'}\n", "preemption.borrowWithinCohort"),
        ("preemption: {borrowPriorityThreshold: 1.5}\n", "preemption.borrowPriorityThreshold"),
        ("preemption: {borrowPriorityThreshold: true}\n", "preemption.borrowPriorityThreshold"),
        ("preemption: {reclaimOthersFirst: 0}\n", "preemption.reclaimOthersFirst"),
        ("preemption: {cascadeWindowSeconds: -1}\n", "preemption.cascadeWindowSeconds"),
        ("preemption: {cascadeWindowSeconds: .nan}\n", "preemption.cascadeWindowSeconds"),
        ("preemption: {cascadeWindowSeconds: '60'}\n", "preemption.cascadeWindowSeconds"),
        ("preemptions: {}\n", "preemptions"),
        ("kubernetes: 3\n", "kubernetes"),
        ("queueing:\n  policy: backfill\n  policy: strict-fifo\n", "queueing.policy"),
        (
            "tenants:\n  - name: a\n    quotas:\n      A100: {nominalQuota: 1}\n      A100: {nominalQuota: 2}\n",
            "tenants[0].quotas.A100",
        ),
    ],
)
def test_every_mistake_is_a_typed_error_naming_its_key_path(text: str, path: str) -> None:
    with pytest.raises(InvalidConfigFileError) as ei:
        load_config_text(text, source="kant.yaml")
    assert ei.value.field == path
    assert str(ei.value).startswith(f"kant.yaml: {path}: ")
    assert isinstance(ei.value, InvalidConfigError)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("a: &x [*x]\n", "contains itself"),
        ("queueing:\n  options: &o {x: *o}\n", "contains itself"),
        ("a: " + "[" * 5000 + "]" * 5000 + "\n", "nested too deeply"),
        ('{"a": ' + "[" * 5000 + "]" * 5000 + "}\n", "nested too deeply"),
        ("tenants:\n  - name: a\n    quotas: {A100: {nominalQuota: " + "9" * 400 + "}}\n",
         "nominalQuota"),
        ("preemption: {minRuntimeSeconds: " + "9" * 400 + "}\n", "minRuntimeSeconds"),
    ],
    ids=["alias in itself", "alias in itself, deeper", "deep YAML", "deep JSON", "huge quota",
         "huge seconds"],
)  # fmt: skip
def test_a_config_that_contains_itself_nests_too_deeply_or_exceeds_floats_is_one_error(
    text: str, says: str
) -> None:
    with pytest.raises(InvalidConfigError, match=says):
        load_config_text(text, source="kant.yaml")


@pytest.mark.parametrize(
    ("text", "path"),
    [
        ("tenants:\n  - name: a\n    quotas: {A100: {nominalQuota: 1.0e+300}}\n",
         "tenants[0].quotas.A100.nominalQuota"),
        ("tenants:\n  - name: a\n    quotas: {A100: {nominalQuota: 1, borrowingLimit: '1e300'}}\n",
         "tenants[0].quotas.A100.borrowingLimit"),
        ("tenants:\n  - name: a\n    quotas: {' A100': {nominalQuota: 1}}\n",
         "tenants[0].quotas. A100"),
        ("preemption: {minRuntimeSeconds: " + "9" * 400 + "}\n", "preemption.minRuntimeSeconds"),
    ],
    ids=["1e300 GPUs", "1e300 GPUs as a string", "a model in spaces", "seconds beyond floats"],
)  # fmt: skip
def test_a_value_the_scheduler_refuses_is_a_config_file_error_naming_the_file_and_key_path(
    text: str, path: str
) -> None:
    # (these passed the file's own checks and were refused by Quota or PreemptionPolicy: the
    # error named their field, 'nominal' or 'min_runtime', and neither the file nor the key)
    with pytest.raises(InvalidConfigFileError) as ei:
        load_config_text(text, source="kant.yaml")
    assert ei.value.field == path
    assert str(ei.value).startswith(f"kant.yaml: {path}: ")


@pytest.mark.parametrize("value", ["1.0e+299", "1.0e+16", "'1e20'"])
def test_a_quota_of_more_gpus_than_kant_counts_exactly_is_refused_in_gpus(value: str) -> None:
    # (1e299 GPUs said "must be an int >= 0 (GPU milli)", for a value the file gives in
    # GPUs, where 1.5 is taken; 1e16 GPUs was taken, off by up to a GPU's milli)
    text = f"tenants:\n  - name: a\n    quotas: {{A100: {{nominalQuota: {value}}}}}\n"
    with pytest.raises(InvalidConfigFileError) as ei:
        load_config_text(text, source="kant.yaml")
    assert ei.value.field == "tenants[0].quotas.A100.nominalQuota"
    assert "number of GPUs" in str(ei.value) and "milli" not in str(ei.value), str(ei.value)


def test_a_config_of_aliases_of_aliases_is_checked_at_its_size_not_its_expansion() -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]
    with pytest.raises(InvalidConfigFileError, match="unknown key"):  # (10**9 leaves unfolded)
        load_config_text("\n".join(lines) + "\n", source="kant.yaml")


def test_bad_yaml_and_a_missing_file_are_config_errors(tmp_path: object) -> None:
    with pytest.raises(InvalidConfigFileError, match="not valid YAML"):
        load_config_text("tenants: [\n", source="k.yaml")
    with pytest.raises(InvalidConfigFileError, match="cannot read"):
        load_config("/nonexistent/kant.yaml")
    with pytest.raises(InvalidConfigFileError, match="must be a mapping"):
        parse_config([1, 2])


def test_a_binary_file_is_a_config_error_naming_the_file(tmp_path: Path) -> None:
    p = tmp_path / "garbage.swf"
    p.write_bytes(b"\x1f\x8b\x08\x00\xff\xfe\x80junk")
    with pytest.raises(InvalidConfigFileError, match="not UTF-8 text") as ei:
        load_config(p)
    assert str(ei.value).startswith(f"{p}: ")


def test_a_config_file_on_disk_is_read(tmp_path: object) -> None:
    import pathlib

    p = pathlib.Path(str(tmp_path)) / "kant.yaml"
    p.write_text(FULL)
    assert load_config(p).queueing.order == "larger-first"


def test_a_configured_quota_holds_back_a_job_beyond_it() -> None:
    cfg = load_config_text(
        "tenants:\n  - name: team-a\n    mode: isolated\n    quotas:\n      H100: {nominalQuota: 8}\n"
    )
    s = cfg.scheduler(ClusterBuilder().leaf("lf0", nodes=4).build())
    s.submit(job("big", gpus=8, replicas=2, tenant="team-a"), now=0)
    s.submit(job("small", gpus=8, tenant="team-a"), now=0)
    r = s.step(now=1)
    assert {b.pod.job for b in r.bindings} == {"small"}
    # beyond the isolated tenant's whole quota: it can never fit (issue 17), and says why
    assert r.pending["big"].code.value == "unsatisfiable"
    assert "quota allows at most 8" in r.pending["big"].message


@settings(max_examples=50, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 4000),  # nominal, half GPUs
            st.one_of(st.none(), st.integers(0, 4000)),  # borrowing limit, half GPUs
            st.one_of(st.none(), st.floats(0, 1)),  # lending share of nominal
            st.sampled_from(["shared", "isolated", None]),
        ),
        min_size=1,
        max_size=5,
    )
)
def test_any_valid_file_gives_exactly_the_quotas_it_states(
    rows: list[tuple[int, int | None, float | None, str | None]],
) -> None:
    import yaml

    from kant.admission import Quota

    tenants = []
    want = []
    for i, (nom, bor, lend_share, mode) in enumerate(rows):
        if mode == "isolated":  # (neither borrows nor lends: limits are refused)
            bor = lend_share = None
        lend = None if lend_share is None else int(nom * lend_share) / 2
        q: dict[str, object] = {"nominalQuota": nom / 2}
        if bor is not None:
            q["borrowingLimit"] = bor / 2
        if lend is not None:
            q["lendingLimit"] = lend
        t: dict[str, object] = {"name": f"t{i}", "quotas": {"H100": q}}
        if mode is not None:
            t["mode"] = mode
        tenants.append(t)
        bl = None if bor is None else bor / 2
        want.append(Quota.gpus(f"t{i}", "H100", nom / 2, borrowing_limit=bl, lending_limit=lend))
    cfg = load_config_text(yaml.safe_dump({"tenants": tenants}))
    assert list(cfg.quotas or ()) == want
    table = cfg.admitter().table
    for i, (*_q, mode) in enumerate(rows):
        assert table.mode(f"t{i}") is QuotaMode(mode or "shared")


def test_an_fgd_strategy_is_valid_and_built_with_the_workload_the_caller_gives() -> None:
    from kant.registry import BuildContext

    cfg = load_config_text("placement: {strategy: fgd, options: {ties: first}}")
    cluster = ClusterBuilder().leaf("lf0", nodes=2).build()
    with pytest.raises(InvalidConfigError, match="'ties' = 'nope'"):  # (options still checked)
        load_config_text("placement: {strategy: fgd, options: {ties: nope}}")
    with pytest.raises(ValidationError, match="needs the target workload"):
        cfg.scheduler(cluster)  # (no workload to tune to: refused where it is built)
    s = cfg.scheduler(cluster, BuildContext(workload=[job("w", gpus=2)]))
    s.submit(job("a", gpus=1), now=0)
    assert s.placer.hooks.name == "fgd" and len(s.step(now=1).bindings) == 1


def test_a_config_that_never_ends_is_refused_after_its_bound_not_read_for_ever(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import kant.config

    monkeypatch.setattr(kant.config, "MAX_CONFIG_CHARS", 1 << 16)
    with pytest.raises(InvalidConfigFileError, match="longer than 65,536 characters"):
        kant.config.load_config("/dev/zero")


@pytest.mark.parametrize(
    ("written", "value"),
    [("1.5e3", 1500.0), ("2.5e2", 250.0), ("1.e3", 1000.0), (".5e3", 500.0), ("1e3", 1000.0),
     ("-1.5E-3", -0.0015), ("1.5e+3", 1500.0), ("-.5", -0.5), ("+.5", 0.5), ("1_000.5e1", 10005.0)],
)  # fmt: skip
def test_a_number_written_as_yaml_1_2_and_json_write_it_is_read_as_that_number(
    written: str, value: float
) -> None:
    # (a JSON config's threshold 1.5e3 was refused: "must be a number >= 0 (got '1.5e3')":
    # PyYAML's YAML 1.1 rules read an exponent after a dot, or without a sign, as a string)
    import yaml

    from kant.topology.fabric import safe_loader

    assert yaml.load(f"x: {written}", Loader=safe_loader(yaml)) == {"x": value}
    if not written.startswith(("-", "+")):
        text = '{"queueing": {"policy": "backfill", "options": {"threshold": WRITTEN}}}'
        text = text.replace("WRITTEN", written)
        assert load_config_text(text).queueing.options == {"threshold": value}


@pytest.mark.parametrize(
    "written",
    ['"1.5e3"', "'1e3'", '"1.10"', "1.5e3.2", "1e", ".e3", "e3", "1.5e3x", "v1.10", "0x1p3",
     "1e_3"],
)  # fmt: skip
def test_text_that_only_looks_like_a_number_or_is_quoted_stays_text(written: str) -> None:
    import yaml

    from kant.topology.fabric import safe_loader

    got = yaml.load(f"x: {written}", Loader=safe_loader(yaml))["x"]
    assert isinstance(got, str) and got == written.strip("'\"")


def test_a_scheduler_built_with_a_workload_context_keeps_the_files_placement_seed() -> None:
    cfg = load_config_text("placement:\n  strategy: fgd\n  seed: 7\n")
    cluster = ClusterBuilder().leaf("lf0", nodes=1).build()
    s = cfg.scheduler(cluster, BuildContext(workload=[job("a")]))
    assert s.placer.strategy.seed == 7  # type: ignore[attr-defined]
    s = cfg.scheduler(cluster, BuildContext(seed=3, workload=[job("a")]))
    assert s.placer.strategy.seed == 3  # type: ignore[attr-defined]


@pytest.mark.parametrize("text", [None, 5, ["queueing: {}"]])
def test_config_text_that_is_no_text_is_an_invalid_config_file(text: object) -> None:
    # None raised AttributeError from inside the YAML reader
    with pytest.raises(InvalidConfigFileError, match="must be a str"):
        load_config_text(text, source="api")  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["team/a", " a", "", 5])
def test_a_tenant_name_no_job_could_carry_is_refused_naming_it(name: object) -> None:
    # 'team/a' was accepted, though a job's tenant cannot hold '/': its quota was dead
    with pytest.raises(InvalidConfigFileError, match=r"tenants\[0\]\.name"):
        parse_config({"tenants": [{"name": name, "quotas": {"H100": {"nominalQuota": 8}}}]})


@pytest.mark.parametrize("text", ["8 m", "1_000", " 2_5 ", "nan", "inf", "8Gi", "-1", "0x10"])
def test_a_quota_string_that_is_no_quantity_of_gpus_is_refused(text: str) -> None:
    # float() read "1_000" as 1000 GPUs and "8 m" as 8 milli
    with pytest.raises(InvalidConfigFileError, match="nominalQuota: must be a number of GPUs"):
        parse_config({"tenants": [{"name": "a", "quotas": {"H100": {"nominalQuota": text}}}]})


@pytest.mark.parametrize(
    ("text", "milli"), [("8", 8000), (" 0.5 ", 500), ("500m", 500), ("1e3", 10**6), (".5", 500)]
)
def test_a_quota_string_in_the_documented_forms_is_read(text: str, milli: int) -> None:
    cfg = parse_config({"tenants": [{"name": "a", "quotas": {"H100": {"nominalQuota": text}}}]})
    assert cfg.quotas[0].nominal == milli


@pytest.mark.parametrize(
    ("written", "value"),
    [("010", 10), ("-010", -10), ("+7", 7), ("1_000", 1000), ("0o17", 15), ("0x1F", 31),
     ("1:30", "1:30"), ("0b11", "0b11"), ("yes", "yes"), ("on", "on"), ("Off", "Off"),
     ("true", True), ("FALSE", False)],
)  # fmt: skip
def test_ints_and_bools_are_read_as_yaml_1_2_writes_them(written: str, value: object) -> None:
    # (YAML 1.1's rules read 010 as eight, 1:30 as ninety, 0b11 as three, yes and on as True:
    # nominalQuota: 010 was 8 GPUs)
    import yaml

    from kant.topology.fabric import safe_loader

    got = yaml.load(f"x: {written}", Loader=safe_loader(yaml))["x"]
    assert got == value and type(got) is type(value)


def test_a_quota_written_with_a_leading_zero_is_read_in_decimal() -> None:
    text = "tenants:\n  - name: t\n    quotas:\n      H100: {nominalQuota: 010}\n"
    (q,) = load_config_text(text).quotas
    assert q.nominal == 10 * 1000
