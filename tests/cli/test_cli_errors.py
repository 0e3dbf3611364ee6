"""Every subcommand, given each kind of mistake: exit code 2, one line on stderr naming the
option and the value, no traceback, and nothing run or written."""

from __future__ import annotations

import argparse
import errno
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kant.cli import main
from kant.cli.sweep import check_grid

BAD: list[tuple[list[str], str]] = [
    # kant simulate
    (["simulate", "--trace", "philly", "--trace-file", "{tmp}/missing.csv"], "--trace-file"),
    (["simulate", "--trace", "swf", "--cluster", "{tmp}/missing.yaml"], "--cluster"),
    (["simulate", "--threshold", "-1"], "--threshold"),
    # a path the file system refuses (a traceback from os.stat), an empty one (the report
    # written into the current folder)
    (["simulate", "--out", "{tmp}/" + "a" * 300], "--out"),
    (["simulate", "--out", ""], "--out"),
    (["compare", "--out", "{tmp}/" + "a" * 300], "--out"),
    (["simulate", "--trace", "philly", "--trace-file", "{tmp}/" + "a" * 300], "--trace-file"),
    (["simulate", "--trace", "openb", "--load", "0.5"], "--load"),  # (was ignored)
    (["simulate", "--seed", "-1"], "--seed"),
    (["simulate", "--jobs", "0"], "--jobs"),
    (["simulate", "--jobs", "many"], "--jobs"),
    (["simulate", "--scenario", "inference", "--jobs", "99999999999999999999"], "--jobs"),
    (["simulate", "--scenario", "inference", "--jobs", "1000000000000"], "--jobs"),
    (["simulate", "--load", "0"], "--load"),
    (["simulate", "--tick", "nan"], "--tick"),
    (["simulate", "--scenario", "inference", "--jobs", "20", "--tick", "1e10"], "--tick"),
    (["simulate", "--scenario", "inference", "--jobs", "20", "--load", "1e-6"], "--load"),
    (["simulate", "--scenario", "inference", "--jobs", "20", "--load", "1e-300"], "--load"),
    (["simulate", "--scenario", "inference", "--jobs", "20", "--load", "1e308"], "--load"),
    (["simulate", "--scenario", "inference", "--jobs", "20", "--mtbf", "inf"], "--mtbf"),
    (["simulate", "--grace", "-5"], "--grace"),
    (["simulate", "--mtbf", "0"], "--mtbf"),
    (["simulate", "--horizon", "-1"], "--horizon"),
    (["simulate", "--mttr", "100"], "--mttr 100"),  # (was ignored: no failures to repair)
    (["compare", "--mttr", "100", "--seeds", "0-1"], "--mttr 100"),
    # (refused once the workload was built and, by compare, the runs started: after the load
    # note and compare's start line)
    (["simulate", "--on-interrupt", "restart", "--mtbf", "86400"], "--on-interrupt restart"),
    (["compare", "--on-interrupt", "restart", "--mtbf", "86400"], "--on-interrupt restart"),
    (
        ["compare", "--on-interrupt", "restart", "--mtbf", "86400", "--max-interruptions", "10001"],
        "--max-interruptions 10001",
    ),
    (["simulate", "--out", "{tmp}/afile/report"], "--out"),
    (["simulate", "--out", "{tmp}/afile"], "--out"),
    (["simulate", "--queueing", "fifo"], "--queueing"),
    (["simulate", "--placement", "tetris"], "--placement"),
    (["simulate", "--trace", "swf", "--cluster", "{tmp}/afile", "--load", "0.9"], "--load"),
    (["simulate", "--trace", "philly", "--scenario", "inference"], "--scenario"),
    (["simulate", "--cluster", "{tmp}/afile"], "--cluster"),
    (["simulate", "--trace-file", "{tmp}/afile"], "--trace-file"),
    (["simulate", "--queueing", "strict-fifo", "--threshold", "60"], "--threshold"),
    (["simulate", "--trace", "philly", "--trace-file", "{tmp}/afile"], "trace"),
    # kant compare
    (["compare", "--seed", "-1"], "--seed"),
    (["compare", "--workers", "0"], "--workers"),
    (["compare", "--seeds", "9-1"], "--seeds"),
    (["compare", "--seeds", "1,1"], "--seeds"),
    (["compare", "--seeds", "0-3", "--seed", "2"], "--seeds"),
    (["compare", "--sets", "backfill"], "--sets"),
    (["compare", "--sets", "backfill+ebinpack,,strict-fifo+ebinpack"], "empty item"),
    (["compare", "--sets", "backfill+ebinpack,"], "empty item"),
    (["compare", "--sets", "backfill+ebinpack,backfill+ebinpack"], "--sets"),
    (["compare", "--sets", "fifo+ebinpack"], "--sets"),
    (["compare", "--out", "{tmp}/afile/x"], "--out"),
    (["compare", "--trace", "openb", "--cluster", "{tmp}/afile", "--load", "2"], "--load"),
    # more seeds than kant takes (MAX_SEEDS): refused before any list of them is made
    (["compare", "--seeds", "0-99999999999"], "--seeds"),
    (["compare", "--seeds", "0-60000,70000-130000"], "--seeds"),
    # an empty item in a seed list (it was dropped: 1,,2 ran seeds 1 and 2)
    (["compare", "--scenario", "inference", "--jobs", "20", "--seeds", "1,,2"], "--seeds '1,,2'"),
    (["compare", "--scenario", "inference", "--jobs", "20", "--seeds", "0-1,"], "--seeds '0-1,'"),
    (["packing", "--pods", "{tmp}/afile", "--nodes", "{tmp}/afile", "--seeds", ",3"], "--seeds"),
    (
        ["packing", "--pods", "{tmp}/afile", "--nodes", "{tmp}/afile", "--seeds", "0-99999999999"],
        "--seeds",
    ),
    # kant packing
    (["packing"], "--pods"),
    (["packing", "--pods", "{tmp}/afile"], "--nodes"),
    (["packing", "--pods", "{tmp}/missing.csv", "--nodes", "{tmp}/afile"], "--pods"),
    (["packing", "--pods", "{tmp}/afile", "--nodes", "{tmp}/afile", "--seeds", "x"], "--seeds"),
    (["packing", "--pods", "{tmp}/afile", "--nodes", "{tmp}/afile", "--inflate", "0"], "--inflate"),
    (
        ["packing", "--pods", "{tmp}/afile", "--nodes", "{tmp}/afile", "--inflate", "1e9"],
        "--inflate",
    ),
    (["packing", "--pods", "{tmp}/afile", "--nodes", "{tmp}/afile", "--policy", "x"], "--policy"),
    (
        ["packing", "--pods", "{tmp}/afile", "--nodes", "{tmp}/afile", "--workers", "-2"],
        "--workers",
    ),
    (
        [
            "packing",
            "--pods",
            "{tmp}/afile",
            "--nodes",
            "{tmp}/afile",
            "--plot",
            "{tmp}/afile/p.png",
        ],
        "--plot",
    ),
    (
        ["packing", "--pods", "{tmp}/afile", "--nodes", "{tmp}/afile", "--plot", "{tmp}/p.xyz"],
        "--plot",
    ),
    (
        ["packing", "--pods", "{tmp}/afile", "--nodes", "{tmp}/afile", "--plot", "{tmp}/p.pgf"],
        "--plot",
    ),
    # kant bench
    (["bench", "cycle", "--nodes", "0"], "--nodes"),
    (["bench", "cycle", "--policy", "fifo"], "--policy"),
    (["bench", "cycle", "--seed", "-1"], "--seed"),
    (["bench", "soak", "--nodes", "-1"], "--nodes"),
    (["bench", "soak", "--bind-fail-one-in", "x"], "--bind-fail-one-in"),
    (["bench", "soak", "--cycles", "2"], "--cycles"),  # (reported by thirds)
    (["bench", "cycle", "--interval", "0"], "--interval"),
    (["bench", "cycle", "--interval", "1e308"], "--interval"),
    (["bench", "place", "--pods", "-5"], "--pods"),
    (["bench", "place", "--strategy", "tetris"], "--strategy"),
    (["bench", "gang", "--replicas", "0"], "--replicas"),
    (["bench", "gang", "--replicas", "200000"], "--replicas"),  # (more than a job may have)
    (["bench", "gang", "--fill", "1.5"], "--fill"),  # (more than every GPU busy)
    # work that cannot be done, measured as if it were (no gang placed, pods left over)
    (["bench", "gang", "--fill", "1"], "--fill"),
    (["bench", "gang", "--nodes", "16", "--replicas", "100"], "--replicas 100"),
    (["bench", "place", "--nodes", "1", "--pods", "1000"], "--pods 1000"),
    (["bench", "place", "--nodes", "1", "--pods", "3", "--mixed", "--seed", "1"], "pods"),
    # offered, then refused by every bench after its set-up: FGD needs a target workload
    (["bench", "place", "--strategy", "fgd"], "--strategy"),
    (["bench", "gang", "--strategy", "fgdpp"], "--strategy"),
    (["bench", "cycle", "--strategy", "fgd"], "--strategy"),
    (["bench", "soak", "--strategy", "fgd"], "--strategy"),
    # sizes that would fill the memory before the first figure (a MemoryError traceback, or
    # a set-up submitting jobs without end)
    (["bench", "place", "--pods", "1000000000000"], "--pods"),
    (["bench", "cycle", "--pending", "1000000000000"], "--pending"),
    (["bench", "soak", "--pending", "1000000000000"], "--pending"),
    (["bench", "snapshot", "--changed", "x"], "--changed"),
    # (named the library's field, 'changed', 'pods', 'pod_gpus': now the options)
    (["bench", "snapshot", "--nodes", "2", "--changed", "5"], "--changed 5 is more than --nodes 2"),
    (["bench", "k8s", "--pods", "300", "--nodes", "10"], "--pods 300: --nodes 10 hold at most 40"),
    (["bench", "k8s", "--pod-gpus", "9"], "argument --pod-gpus"),
    (["bench", "k8s", "--creators", "0"], "argument --creators"),
    (["bench", "k8s", "--nodes", "-3"], "argument --nodes"),
    # kant k8s
    (["k8s", "demo", "--speed", "0"], "--speed"),
    (["k8s", "demo", "--speed", "-1"], "--speed"),
    (["k8s", "demo", "--speed", "inf"], "--speed"),
    (["k8s", "demo", "--speed", "nan"], "--speed"),
    (["k8s", "demo", "--nodes", "0"], "--nodes"),
    (["k8s", "demo", "--nodes", "100000"], "--nodes"),
    (["k8s", "demo", "--jobs", "-1"], "--jobs"),
    (["k8s", "demo", "--jobs", "1000000"], "--jobs"),
    (["k8s", "demo", "--seed", "-1"], "--seed"),
    # kant itself
    (["simulate", "--no-such-option"], "--no-such-option"),
    (["launch"], "launch"),
    ([], "command"),
]


@pytest.mark.parametrize(("argv", "named"), BAD, ids=[" ".join(a) or "(none)" for a, _ in BAD])
def test_a_mistake_is_one_line_naming_it_and_exit_code_2(
    argv: list[str], named: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "afile").write_text("not a trace\n")
    args = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    try:
        code = main(args)
    except SystemExit as e:
        code = e.code
    out, err = capsys.readouterr()
    assert code == 2
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert named in lines[0]
    assert "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]  # nothing written


WRITERS = [
    (["simulate"], "kant.cli.simulate.write_report", "--out"),
    (["compare", "--sets", "backfill+ebinpack"], "kant.cli.compare.write_compare_report", "--out"),
    (["compare", "--seeds", "0-1"], "kant.cli.compare.write_seed_sweep_report", "--out"),
]


@pytest.mark.parametrize(("argv", "writer", "option"), WRITERS, ids=[w for _, w, _ in WRITERS])
def test_an_output_that_fails_to_be_written_is_one_line_naming_the_option_and_path(
    argv: list[str],
    writer: str,
    option: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    def disk_full(*_a: object, **_k: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(writer, disk_full)
    out = tmp_path / "report"
    base = ["--scenario", "inference", "--jobs", "20", "--quiet", "--workers", "1"]
    if argv[0] == "simulate":
        base.remove("--workers")
        base.remove("1")
    assert main([*argv, *base, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    last = err.splitlines()[-1]  # (after the few-jobs note)
    assert f"{option} {out}" in last and "No space left on device" in last, err
    assert err.count("cannot write") == 1 and "Traceback" not in err


def test_a_plot_that_fails_to_be_written_is_one_line_naming_the_option_and_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def disk_full(*_a: object, **_k: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("kant.cli.packing.plot_curves", disk_full)
    pods = tmp_path / "pods.csv"
    pods.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\np0,1000,100,1,1000,\n")
    nodes = tmp_path / "nodes.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,2,P100\n")
    png = tmp_path / "curve.png"
    argv = ["packing", "--pods", str(pods), "--nodes", str(nodes), "--seeds", "1"]
    assert main([*argv, "--workers", "1", "--plot", str(png)]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1, err
    assert f"--plot {png}" in err and "No space left on device" in err


@pytest.mark.parametrize("command", ["simulate", "compare"])
def test_a_cluster_file_with_a_repeated_key_is_one_line(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    swf = tmp_path / "log.swf"
    swf.write_text("; MaxProcs: 16\n1 0 0 100 4 -1 -1 4 200 -1 1 1 1 -1 1 -1 -1 -1\n")
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text("version: 1\nnodes:\n  - name: n0\n    gpus: 8\n    gpus: 4\n")
    argv = [command, "--trace", "swf", "--trace-file", str(swf), "--cluster", str(cluster)]
    assert main([*argv, "--quiet", "--out", str(tmp_path / "out")]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1, err
    assert str(cluster) in err and "gpus" in err and "twice" in err
    assert not (tmp_path / "out").exists()


def test_the_version_is_printed() -> None:
    r = subprocess.run(
        [sys.executable, "-m", "kant", "--version"], capture_output=True, text=True, check=False
    )
    assert r.returncode == 0 and r.stdout.startswith("kant ")


def test_output_piped_into_head_ends_quietly() -> None:
    code = "import sys; from kant.cli import main; sys.exit(main(['packing', '--list-policies']))"
    p = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0
    )
    assert p.stdout is not None and p.stderr is not None
    p.stdout.read(5)
    p.stdout.close()  # what head does after its lines
    err = p.stderr.read().decode()
    p.wait()
    assert "Traceback" not in err and "BrokenPipe" not in err
    assert err == ""


@pytest.mark.parametrize(
    "argv",
    [
        ["simulate"],
        ["compare"],
        ["packing"],
        ["bench", "cycle"],
        ["bench", "place"],
        ["bench", "gang"],
        ["bench", "snapshot"],
        ["bench", "soak"],
    ],
)
def test_every_option_with_a_default_shows_it_in_help(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        main([*argv, "--help"])
    out = capsys.readouterr().out
    assert "%%" not in out
    from kant.cli import build_parser

    parser = build_parser()
    sub = parser._subparsers._group_actions[0].choices[argv[0]]  # type: ignore[union-attr]
    if len(argv) > 1:
        sub = sub._subparsers._group_actions[0].choices[argv[1]]  # type: ignore[union-attr]
    for action in sub._actions:
        if action.option_strings and action.nargs != 0 and action.default is not None:
            # (what --help prints: argparse shows no default for an option without a help text)
            h = sub._get_formatter()._format_action(action)
            assert "default" in h, f"{action.option_strings}: {h}"


def test_a_plot_named_without_an_extension_is_reported_as_the_png_file_written(
    tmp_path: Path,
) -> None:
    from kant.cli.options import image_file

    assert image_file(str(tmp_path / "curve")) == str(tmp_path / "curve.png")
    assert image_file(str(tmp_path / "curve.svg")) == str(tmp_path / "curve.svg")
    # a folder, or something that is no file, is not given a .png beside it
    (tmp_path / "plots").mkdir()
    for name, said in ((tmp_path / "plots", "is a folder"), ("/dev/null", "not a regular file")):
        with pytest.raises(argparse.ArgumentTypeError, match=said):
            image_file(str(name))
    assert not (tmp_path / "plots.png").exists()
    # a name ending in a slash names a folder, made or not ("'new/.png': cannot save a plot
    # as ." was said)
    for name in (f"{tmp_path}/new/", f"{tmp_path}/plots/"):
        with pytest.raises(argparse.ArgumentTypeError, match="names a folder"):
            image_file(name)


def test_a_sweep_report_folder_given_empty_is_refused_as_simulates_is(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # (--out "" was read as no --out: the report went to the store's default folder)
    store = tmp_path / "g.jsonl"
    store.write_text("")
    assert main(["sweep", "report", str(store), "--out", ""]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "--out: an empty path" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g.jsonl"]


def _philly(tmp: Path, rows: list[str]) -> str:
    p = tmp / "philly.csv"
    p.write_text("timestamp,duration,num_gpus,gpu_time,cluster\n" + "".join(rows))
    return str(p)


GOOD_ROW = "2017-10-03 02:54:00,600,8,4800,vc1\n"
RUNAWAY = [
    # one broken timestamp or duration: the run would sample the metrics every 600 s up to
    # the end of time (it ran for ever, its memory growing)
    (lambda t: ["--trace", "philly", "--trace-file", _philly(t, [GOOD_ROW, "0001-10-03 02:54:00,600,8,4800,vc1\n"])], "20 years"),
    (lambda t: ["--trace", "philly", "--trace-file", _philly(t, [GOOD_ROW, "2017-10-03 02:55:00,1e300,8,1,vc1\n"])], "20 years"),
    # (--mttr 1e300 is refused by the option now:
    # test_a_simulated_time_past_twenty_years_is_refused_by_the_option_before_any_work)
    (lambda t: ["--trace", "swf", "--trace-file", _write_swf(t, "; MaxProcs: 99999999999\n")], "MaxProcs"),
    # submitted near 1e16 s: a float there steps by 2 s, so a 1 s job ended when it started
    (lambda t: ["--trace", "swf", "--trace-file", _write_swf(t, "", submit="10000000000000001")], "milliseconds"),
]  # fmt: skip


def _write_swf(tmp: Path, header: str, submit: str = "0") -> str:
    p = tmp / "log.swf"
    p.write_text(header + f"1 {submit} 0 100 4 -1 -1 4 100 -1 1 1 1 1 1 -1 -1 -1\n")
    return str(p)


@pytest.mark.parametrize(
    ("kind", "name", "text"),
    [
        ("swf", "cluster.yaml", "version: 1\nnodes: []\n"),
        ("swf", "cluster.yaml", "version: 1\n"),
        ("swf", "cluster.yaml", "version: 1\nnodes: [{name: n0, gpus: 0}]\n"),
        ("openb", "nodes.csv", "sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,0,\n"),
    ],
    ids=["no nodes", "no nodes key", "a CPU node", "openb CPU nodes"],
)
def test_a_cluster_without_gpus_is_one_line_not_a_run_where_no_job_starts(
    kind: str, name: str, text: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # (the run ended at 0 s with every job pending and reported their waits as 0 s)
    trace = _write_swf(tmp_path, "")
    if kind == "openb":
        trace = str(tmp_path / "pods.csv")
        Path(trace).write_text(
            "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
            "deletion_time,scheduled_time\np0,1000,1024,1,1000,,LS,Running,0,100,0\n"
        )
    cluster = tmp_path / name
    cluster.write_text(text)
    out = tmp_path / "out"
    argv = ["simulate", "--trace", kind, "--trace-file", trace, "--cluster", str(cluster)]
    assert main([*argv, "--quiet", "--no-plots", "--out", str(out)]) == 2
    std, err = capsys.readouterr()
    assert std == "" and len(err.splitlines()) == 1, err
    assert str(cluster) in err and "has no GPUs" in err
    assert not out.exists()


@pytest.mark.parametrize(
    ("argv", "named"), RUNAWAY, ids=["year 1", "1e300 s", "maxprocs", "1e16 s"]
)
def test_times_or_sizes_beyond_kants_limits_are_one_line_not_a_run_without_end(
    argv: Any, named: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    code = main(["simulate", *argv(tmp_path), "--no-plots", "--quiet", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and named in err.splitlines()[-1] and "Traceback" not in err


def test_a_broken_timestamp_names_both_jobs_before_anything_is_printed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # (the year-1 row sorts first and every good job is 2,000 years after it: the error
    # named the first good job only, after the scenario's load note was printed)
    trace = _philly(tmp_path, [GOOD_ROW, GOOD_ROW, "0001-10-03 02:54:00,600,8,4800,vc1\n"])
    argv = ["simulate", "--trace", "philly", "--trace-file", trace, "--no-plots"]
    assert main([*argv, "--out", str(tmp_path / "o")]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1, err
    assert "'philly-00002'" in err and "'philly-00000'" in err and "20 years" in err


def test_a_compare_over_seeds_of_a_broken_trace_is_one_line_and_leaves_no_old_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # (each seed's run failed in its worker: exit 1, one line per seed ending in kant's own
    # source path, and the compare.json of an earlier run left beside the new runs.jsonl)
    out = tmp_path / "o"
    good = _philly(tmp_path, [GOOD_ROW, GOOD_ROW.replace("02:54", "03:54")])
    argv = ["compare", "--trace", "philly", "--seeds", "0,1", "--sets", "backfill+ebinpack",
            "--quiet", "--no-plots", "--out", str(out)]  # fmt: skip
    assert main([*argv, "--trace-file", good]) == 0
    assert (out / "compare.json").exists()
    (said,) = [line for line in capsys.readouterr().out.splitlines() if "report:" in line]
    assert "runs.jsonl" in said  # (the files it wrote: the runs' records were not listed)
    bad = _philly(tmp_path, [GOOD_ROW, "9999-12-31 23:59:59,66,1,66.0,vc1\n"])
    assert main([*argv, "--trace-file", bad]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "broken timestamp" in err and " (at " not in err
    # (refused before any run: the report is kept, and the store it was made of)
    assert sorted(p.name for p in out.iterdir()) == ["compare.json", "compare.txt", "runs.jsonl"]


@pytest.mark.parametrize("value", ["-5", "abc", "0", "12.5", "\u00b2"])
def test_an_swf_maxprocs_that_is_no_positive_integer_is_refused_in_one_line(
    value: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # it was read as absent, and the log ran on a machine sized for it (the superscript two:
    # str.isdigit says yes, int() says no)
    log = _write_swf(tmp_path, f"; MaxProcs: {value}\n")
    out = tmp_path / "out"
    assert main(["simulate", "--trace", "swf", "--trace-file", log, "--no-plots", "--quiet",
                 "--out", str(out)]) == 2  # fmt: skip
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "MaxProcs" in err and "positive integer" in err
    assert err.startswith(f"kant simulate: {log}: "), err  # (the file was not named)


def test_an_swf_maxprocs_given_twice_two_ways_is_refused_naming_the_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the first was taken without a word; the same value twice is no conflict
    out = tmp_path / "out"
    argv = ["simulate", "--no-plots", "--quiet", "--out", str(out), "--trace", "swf"]
    log = _write_swf(tmp_path, "; MaxProcs: 128\n; MaxProcs: 64\n")
    assert main([*argv, "--trace-file", log]) == 2
    err = capsys.readouterr().err
    assert f"{log}:2: " in err and "given twice, first as '128'" in err, err
    log = _write_swf(tmp_path, "; MaxProcs: 128\n; MaxProcs: 128\n")
    assert main([*argv, "--trace-file", log]) == 0


def test_an_swf_maxprocs_of_minus_one_is_an_unknown_machine(tmp_path: Path) -> None:
    # SWF writes -1 for what it does not know: the run sizes a machine for the log
    log = _write_swf(tmp_path, "; MaxProcs: -1\n")
    out = tmp_path / "out"
    assert main(["simulate", "--trace", "swf", "--trace-file", log, "--no-plots", "--quiet",
                 "--out", str(out)]) == 0  # fmt: skip


def test_the_help_states_every_built_in_scenarios_default_load_and_tick() -> None:
    # (it said "default 0.95 training, 0.9 inference" and "60 s, inference 30 s": nothing of
    # inference-paper, whose load is 0.95, not the inference scenario's 0.9)
    import inspect

    from kant.cli import build_parser
    from kant.sim.scenarios import SCENARIOS

    parser = build_parser()
    sim = parser._subparsers._group_actions[0].choices["simulate"]  # type: ignore[union-attr]
    helps = {a.dest: a.help or "" for a in sim._actions}
    by_load: dict[float, list[str]] = {}
    for name, make in SCENARIOS.items():
        load = inspect.signature(make).parameters["load"].default
        by_load.setdefault(load, []).append(name)
        assert name in helps["tick"], helps["tick"]
        if name != "inference-paper":  # (built from the shared trace folder)
            assert f"{make(jobs=1).config.tick:g} s {name}" in helps["tick"], helps["tick"]
    for load, names in by_load.items():
        assert f"{load:g} {' and '.join(names)}" in helps["load"], helps["load"]


def test_a_number_too_long_to_read_in_a_config_or_a_sweep_store_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # (a ValueError traceback: Python refuses ints of more than 4,300 digits)
    cfg = tmp_path / "c.yaml"
    cfg.write_text("placement: {seed: 1" + "0" * 5000 + "}\n")
    store = tmp_path / "s.jsonl"
    store.write_text('{"id": 1' + "0" * 5000 + "}\n")
    deep = tmp_path / "d.jsonl"
    deep.write_text("[" * 100_000 + "\n")
    for argv, named in (
        (["simulate", "--config", str(cfg), "--out", str(tmp_path / "o")], "4,300 digits"),
        (["sweep", "report", str(store)], "4,300 digits"),
        (["sweep", "report", str(deep)], "nested too deeply"),
    ):
        assert main(argv) == 2
        out, err = capsys.readouterr()
        assert out == "" and len(err.splitlines()) == 1 and named in err, err


def test_a_trace_file_name_that_is_not_utf8_is_shown_escaped_in_the_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # (the run finished, then writing summary.txt raised UnicodeEncodeError)
    log = Path(_write_swf(tmp_path, ""))
    odd = tmp_path / os.fsdecode(b"log\xff.swf")
    log.rename(odd)
    out = tmp_path / "out"
    code = main(["simulate", "--trace", "swf", "--trace-file", str(odd), "--no-plots",
                 "--quiet", "--out", str(out)])  # fmt: skip
    assert code == 0, capsys.readouterr().err
    assert "log\\udcff.swf" in (out / "summary.txt").read_text()


def test_a_trace_job_no_node_of_the_cluster_can_hold_is_one_line_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # (it waited to the end of the run, its wait counted in JWTD)
    nodes = tmp_path / "nodes.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,8,V100M16\n")
    head = ("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
            "deletion_time,scheduled_time\n")  # fmt: skip
    for row, named in (
        ("p0,1000,1024,9,1000,,LS,Running,0,100,0", "9 GPUs"),
        ("p0,1000,1024,1,1000,A100,LS,Running,0,100,0", "model A100"),
        ("p0,99000,1024,1,1000,,LS,Running,0,100,0", "99000 CPU milli"),
    ):
        pods = tmp_path / "pods.csv"
        pods.write_text(head + row + "\n")
        argv = ["simulate", "--trace", "openb", "--trace-file", str(pods), "--cluster", str(nodes)]
        assert main([*argv, "--quiet", "--no-plots", "--out", str(tmp_path / "o")]) == 2
        out, err = capsys.readouterr()
        assert out == "" and len(err.splitlines()) == 1, err
        assert "p0 could never start" in err and named in err


def test_an_swf_job_larger_than_the_logs_machine_is_one_line_not_a_bigger_machine(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # (the machine grew to the job's size and was still called "the log's own machine")
    log = tmp_path / "log.swf"
    log.write_text("; MaxProcs: 8\n1 0 0 100 64 -1 -1 64 100 -1 1 1 1 1 1 -1 -1 -1\n")
    argv = ["simulate", "--trace", "swf", "--trace-file", str(log), "--quiet", "--no-plots"]
    assert main([*argv, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "asks 64 processors" in err and "MaxProcs" in err


def test_policy_names_are_read_in_any_case_as_config_files_read_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # (a config file's "policy: Backfill" ran; "--queueing Backfill" and "--sets
    # Backfill+EBinpack" were refused)
    from kant.sim.scenarios import PolicySet

    assert PolicySet(queueing="Backfill", placement="EBinpack").label == "backfill+ebinpack"
    assert PolicySet.parse("Strict-FIFO+Spread+NONE").label == "strict-fifo+spread+none"
    small = ["--scenario", "inference", "--jobs", "5", "--quiet", "--no-plots"]
    assert main(["simulate", *small, "--queueing", "Backfill", "--placement", "EBinpack",
                 "--preemption", "Auto", "--out", str(tmp_path / "s")]) == 0  # fmt: skip
    assert main(["compare", *small, "--sets", "Backfill+EBinpack,strict-fifo+Spread",
                 "--out", str(tmp_path / "c")]) == 0  # fmt: skip
    assert "strict-fifo+spread" in (tmp_path / "c" / "compare.txt").read_text()


def test_simulate_takes_the_preemption_kinds_joined_by_plus_that_its_report_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # (the inference scenario's report says "preemption reclaim+backfill", and PolicySet,
    # --sets and a compare grid take it; --preemption and a simulate grid refused it)
    from kant.sweep import Grid

    small = ["--scenario", "inference", "--jobs", "5", "--quiet", "--no-plots", "--json"]
    out = tmp_path / "s"
    assert main(["simulate", *small, "--preemption", "Reclaim+Backfill", "--out", str(out)]) == 0
    assert '"preemption": "reclaim+backfill"' in capsys.readouterr().out.splitlines()[-1]
    check_grid(Grid("simulate", {"jobs": 20, "preemption": "priority+reclaim"}))
    for bad in ("reclaim+reclaim", "reclaim+every", "auto+backfill", "reclaim+"):
        with pytest.raises(SystemExit) as refused:
            main(["simulate", *small, "--preemption", bad, "--out", str(out)])
        assert refused.value.code == 2
        err = capsys.readouterr().err
        assert len(err.splitlines()) == 1 and "--preemption" in err and repr(bad) in err


def test_restarts_under_failures_are_bounded_by_the_config_files_limit_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # (refused only by the Simulator, after the workload was built and the load note said)
    unbounded, bounded = tmp_path / "u.yaml", tmp_path / "b.yaml"
    unbounded.write_text("queueing: {policy: backfill}\n")
    bounded.write_text("queueing: {requeuing: {interruptionLimitCount: 3}}\n")
    argv = ["simulate", "--scenario", "inference", "--jobs", "5", "--on-interrupt", "restart",
            "--mtbf", "86400", "--quiet", "--no-plots", "--out", str(tmp_path / "o")]  # fmt: skip
    assert main([*argv, "--config", str(unbounded)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1 and "--on-interrupt restart" in err
    assert main([*argv, "--config", str(unbounded), "--max-interruptions", "2"]) == 0
    assert main([*argv, "--config", str(bounded)]) == 0
    capsys.readouterr()
    assert main([*argv, "--config", str(bounded), "--max-interruptions", "10001"]) == 2
    assert "--max-interruptions 10001" in capsys.readouterr().err


def test_a_quota_on_a_gpu_model_the_scenario_lacks_is_one_line_not_a_run_of_waits(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # (every job of the tenant waited to the end: GAR 0%, exit 0)
    cfg = tmp_path / "c.yaml"
    cfg.write_text("tenants:\n  - name: a\n    quotas:\n      a100: {nominalQuota: 8}\n")
    argv = ["simulate", "--scenario", "inference", "--jobs", "5", "--config", str(cfg)]
    assert main([*argv, "--quiet", "--no-plots", "--out", str(tmp_path / "o")]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1
    assert "'a100'" in err and "A100" in err and str(cfg) in err


def test_a_kant_traces_folder_that_does_not_exist_is_named_as_such(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # (it said "set $KANT_TRACES", which was set)
    monkeypatch.setenv("KANT_TRACES", str(tmp_path / "nowhere"))
    for argv in (["--trace", "philly"], ["--scenario", "inference-paper"]):
        assert main(["simulate", *argv, "--quiet", "--out", str(tmp_path / "o")]) == 2
        err = capsys.readouterr().err
        assert len(err.splitlines()) == 1 and "nowhere' is not a folder" in err, err


def test_a_command_leaves_the_kant_logger_as_the_caller_set_it(tmp_path: Path) -> None:
    # a command run in the caller's process set the logger's level (warning, or error for a
    # sweep) and kept it: a warning logged after it, by the shim in a test, went nowhere
    import logging

    lg = logging.getLogger("kant")
    before = (lg.level, list(lg.handlers))
    lg.setLevel(logging.DEBUG)
    try:
        out = tmp_path / "out"
        assert main(["--log-level", "error", "simulate", "--scenario", "inference", "--jobs",
                     "20", "--no-plots", "--quiet", "--out", str(out)]) == 0  # fmt: skip
        assert lg.level == logging.DEBUG and lg.handlers == before[1]
    finally:
        lg.setLevel(before[0])


@pytest.mark.parametrize(
    "argv",
    [
        ["packing", "--list-policies"],
        ["simulate", "--scenario", "inference", "--jobs", "5", "--no-plots", "--quiet"],
        ["bench", "place", "--nodes", "2", "--pods", "3"],
    ],
    ids=["packing", "simulate", "bench place"],
)
def test_a_stdout_that_cannot_be_written_is_one_line_and_exit_code_2(
    argv: list[str], tmp_path: Path
) -> None:
    # (a full disk behind stdout was an OSError traceback, exit code 1)
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    if argv[0] == "simulate":
        argv = [*argv, "--out", str(tmp_path / "o")]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    with open("/dev/full", "w") as full:
        r = subprocess.run(
            [sys.executable, "-m", "kant", *argv],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            check=False,
            cwd=tmp_path,
            env={**env, "PYTHONPATH": str(Path(__file__).parents[2])},
        )
    lines = r.stderr.splitlines()
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr and "Exception ignored" not in r.stderr
    assert lines[-1].startswith(f"kant {argv[0]}")
    assert "cannot write the output: No space left on device" in lines[-1]
    assert len([ln for ln in lines if "note:" not in ln]) == 1, r.stderr


def test_an_error_with_no_path_while_stdout_is_fine_is_not_called_an_output_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # (any nameless ENOSPC/EIO was "cannot write the output", and its traceback was lost)
    def broken(*_a: object, **_k: object) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr("kant.cli.simulate.run_scenario", broken)
    argv = ["simulate", "--scenario", "inference", "--jobs", "20", "--quiet", "--no-plots"]
    assert main(["--log-level", "debug", *argv, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "cannot write the output" not in err and "Input/output error" in err
    assert "Traceback" in err and "in broken" in err  # (--log-level debug: where it came from)


_EMBEDDED = """
import sys
from kant.cli import main
print("before", flush=True)
rc = main(["simulate", "--trace", "swf", "--trace-file", sys.argv[1], "--quiet",
           "--no-plots", "--out", sys.argv[2]])
print("after", rc, flush=True)
"""


def test_an_input_that_fails_to_be_read_is_named_and_a_callers_stdout_is_kept(
    tmp_path: Path,
) -> None:
    # (reading /proc/self/mem fails with EIO: it was "cannot write the output", and stdout
    # was sent to /dev/null, the caller's own prints after main() lost)
    mem = Path("/proc/self/mem")
    if not mem.exists():
        pytest.skip("no /proc/self/mem")
    r = subprocess.run(
        [sys.executable, "-c", _EMBEDDED, str(mem), str(tmp_path / "o")],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])},
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["before", "after", "2"], r.stdout
    assert r.stderr.startswith(f"kant simulate: {mem}:1: ") and "cannot be read" in r.stderr
    assert "cannot write the output" not in r.stderr and len(r.stderr.splitlines()) == 1


def _inputs(tmp: Path) -> dict[str, Path]:
    """A philly trace, a cluster file, a config file, an openb pod and node list, a sweep
    store, each where a report would write one of its own files."""
    out = tmp / "out"
    out.mkdir()
    files = {
        "trace": out / "jobs.csv",
        "cluster": out / "summary.json",
        "config": out / "summary.txt",
        "compare": out / "compare.json",
        "runs": out / "runs.jsonl",
        "pods": tmp / "pods.png",
        "nodes": tmp / "nodes.csv",
        "store": out / "report.txt",
    }
    files["trace"].write_text("timestamp,duration,num_gpus,gpu_time,cluster\n" + GOOD_ROW)
    for name in ("compare", "runs"):
        files[name].write_text(files["trace"].read_text())
    files["cluster"].write_text(
        '{"version": 1, "nodes": [{"name": "n0", "gpus": 8, "gpu_model": "A100"}]}\n'
    )
    files["config"].write_text("queueing: {policy: backfill}\n")
    files["pods"].write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\np0,1000,100,1,1000,\n"
    )
    files["nodes"].write_text("sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,2,P100\n")
    files["store"].write_text(
        '{"key": "x", "kind": "sim", "params": {"seed": 0}, "status": "failed", '
        '"error": "boom", "wall_s": 1.0}\n'
    )
    return files


OWN_INPUT = [
    (["simulate", "--trace", "philly", "--trace-file", "{trace}", "--out", "{tmp}/out"],
     "--trace-file"),
    (["simulate", "--scenario", "inference", "--jobs", "5", "--config", "{config}", "--out",
      "{tmp}/out"], "--config"),
    (["simulate", "--trace", "philly", "--trace-file", "{tmp}/link.csv", "--out", "{tmp}/out"],
     "--trace-file"),
    (["simulate", "--trace", "swf", "--trace-file", "{tmp}/log.swf", "--cluster", "{cluster}",
      "--out", "{tmp}/out"], "--cluster"),
    (["compare", "--trace", "philly", "--trace-file", "{compare}", "--out", "{tmp}/out"],
     "--trace-file"),
    (["compare", "--trace", "philly", "--trace-file", "{runs}", "--seeds", "0-1", "--out",
      "{tmp}/out"], "--trace-file"),
    (["packing", "--pods", "{pods}", "--nodes", "{nodes}", "--seeds", "1", "--workers", "1",
      "--plot", "{pods}"], "--pods"),
    (["sweep", "report", "{store}", "--out", "{tmp}/out"], "STORE"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("argv", "named"),
    OWN_INPUT,
    ids=["trace", "config", "symlink", "cluster", "compare", "seeds", "plot", "report"],
)
def test_an_output_that_is_one_of_the_commands_own_inputs_is_refused_before_any_work(
    argv: list[str], named: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # (kant simulate --trace-file o5/jobs.csv --out o5 replaced the trace with the results)
    files = _inputs(tmp_path)
    (tmp_path / "link.csv").symlink_to(files["trace"])
    (tmp_path / "log.swf").write_text("1 0 0 100 4 -1 -1 4 100 -1 1 1 1 1 1 -1 -1 -1\n")
    before = {p: p.read_bytes() for p in files.values()}
    names = {k: str(v) for k, v in files.items()} | {"tmp": str(tmp_path)}
    args = [a.format(**names) for a in argv]
    if args[0] in ("simulate", "compare"):
        args.append("--quiet")
    assert main(args) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1, err
    assert named in err and "own input" in err, err
    assert {p: p.read_bytes() for p in files.values()} == before
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(
        p.name for p in files.values() if p.parent.name == "out"
    )


@pytest.mark.parametrize("mtbf", ["1e-300", "1e-6", "0.5"])
def test_a_failure_model_under_which_time_cannot_advance_is_refused_not_run_for_ever(
    mtbf: str, tmp_path: Path
) -> None:
    # (--mtbf 1e-300 --mttr 0: each node failed, came back and failed again at the same
    # instant, and the run never ended)
    from kant.errors import InvalidGridError, ValidationError
    from kant.sim.simulator import MIN_MTBF, SimConfig
    from kant.sweep import Grid

    argv = ["simulate", "--scenario", "inference", "--jobs", "5", "--mtbf", mtbf, "--mttr", "0",
            "--horizon", "100", "--no-plots", "--quiet", "--out", str(tmp_path / "o")]  # fmt: skip
    r = subprocess.run(
        [sys.executable, "-m", "kant", *argv],
        capture_output=True, text=True, check=False, timeout=60,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])},
    )  # fmt: skip
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1, r.stderr
    assert f"--mtbf: must be a number >= {MIN_MTBF:g} " in r.stderr
    assert f"(got '{mtbf}')" in r.stderr
    with pytest.raises(ValidationError, match="mtbf"):
        SimConfig(mtbf=float(mtbf), mttr=0.0)
    grid = Grid("simulate", {"scenario": "inference", "jobs": 5, "mtbf": [3600, float(mtbf)]})
    with pytest.raises(InvalidGridError, match="mtbf"):
        check_grid(grid)
    check_grid(Grid("simulate", {"scenario": "inference", "jobs": 5, "mtbf": MIN_MTBF}))
    SimConfig(mtbf=MIN_MTBF, mttr=0.0)


def test_a_gang_job_whose_pods_cannot_all_be_held_at_once_is_one_line_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # 3 pods of 7 GPUs on nodes of 8, 8 and 5: each pod fits a node, the 21 GPUs fit the 21
    # of the cluster, but only two pods can run at once (the job waited to the end of the run)
    import attrs

    from kant.topology import dump_cluster, fat_tree_for_nodes

    desc = fat_tree_for_nodes(3)
    last = attrs.evolve(desc.nodes[-1], gpus=5, rdma_nics=5, template=None)
    cluster = tmp_path / "c.yaml"
    dump_cluster(attrs.evolve(desc, nodes=(*desc.nodes[:-1], last)), cluster)
    log = tmp_path / "log.swf"
    log.write_text("1 0 0 100 21 -1 -1 21 100 -1 1 1 1 1 1 -1 -1 -1\n")
    argv = ["simulate", "--trace", "swf", "--trace-file", str(log), "--cluster", str(cluster)]
    assert main([*argv, "--quiet", "--no-plots", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "swf-1 could never start" in err, err
    assert "at most 2 of them" in err, err


def test_a_config_given_as_a_pipe_is_read(tmp_path: Path) -> None:
    # (--config <(cat cfg.yaml) and --config /dev/stdin were refused as "no such file")
    import threading

    if not hasattr(os, "mkfifo"):
        pytest.skip("no named pipes")
    fifo = tmp_path / "cfg.yaml"
    os.mkfifo(fifo)

    def feed() -> None:
        with fifo.open("w") as f:
            f.write("queueing: {policy: strict-fifo}\n")

    writer = threading.Thread(target=feed, daemon=True)
    writer.start()
    out = tmp_path / "out"
    argv = ["simulate", "--scenario", "inference", "--jobs", "20", "--no-plots", "--quiet"]
    assert main([*argv, "--config", str(fifo), "--out", str(out)]) == 0
    writer.join(timeout=10)
    assert "strict-fifo" in (out / "summary.txt").read_text()
    with pytest.raises(SystemExit) as e:  # (a folder is still refused by the parser)
        main([*argv, "--config", str(tmp_path), "--out", str(out)])
    assert e.value.code == 2


@pytest.mark.parametrize(
    ("path", "says"),
    [("/dev/null", "is not a regular file"), (".", "is a folder, not a file"), ("nope", "no such")],
)
def test_a_trace_file_that_is_no_regular_file_is_refused_for_what_it_is(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], path: str, says: str
) -> None:
    # /dev/null and a folder were refused as "no such file", though both exist
    argv = ["simulate", "--trace", "swf", "--trace-file", path, "--out", str(tmp_path / "o")]
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err, err


@pytest.mark.parametrize("option", ["--grace", "--horizon", "--mtbf", "--mttr"])
def test_a_simulated_time_past_twenty_years_is_refused_by_the_option_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], option: str
) -> None:
    # 1e308 passed the option's check (">= 0"): the workload was built and a load note
    # printed before the run's own 20-year bound refused it
    argv = ["simulate", "--jobs", "5", "--quiet", "--no-plots", "--out", str(tmp_path / "o")]
    with pytest.raises(SystemExit) as e:
        main([*argv, option, "1e308"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"argument {option}" in err and "<= 6.3072e+08" in err, err


def test_a_sweep_report_into_a_closed_pipe_ends_quietly(tmp_path: Path) -> None:
    # kant sweep report STORE | head -1 printed "kant sweep: [Errno 32] Broken pipe", exit 2
    store = tmp_path / "s.jsonl"
    store.write_text(
        '{"key": "f", "kind": "sim", "params": {}, "status": "failed", "error": "E: x"}\n'
    )
    read, write = os.pipe()
    os.close(read)  # (the reader went away before anything was written)
    try:
        r = subprocess.run(
            [sys.executable, "-m", "kant", "sweep", "report", str(store), "--no-plots",
             "--out", str(tmp_path / "r")],
            stdout=write, stderr=subprocess.PIPE, text=True, check=False, timeout=120,
            env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])},
        )  # fmt: skip
    finally:
        os.close(write)
    assert r.returncode == 141 and r.stderr == "", r.stderr


@pytest.mark.parametrize(
    "argv",
    [["packing", "--list-policies"], ["bench", "place", "--nodes", "2", "--pods", "3"]],
    ids=["packing", "bench place"],
)
def test_a_closed_stdout_is_one_line_and_exit_code_2(argv: list[str], tmp_path: Path) -> None:
    # (stdout closed, `kant ... >&-`: Python's sys.stdout is None; the output was dropped,
    # then an AttributeError traceback, exit code 1)
    r = subprocess.run(
        [sys.executable, "-m", "kant", *argv],
        stderr=subprocess.PIPE,
        text=True,
        check=False,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])},
        preexec_fn=lambda: os.close(1),  # (closes the child's stdout only)
    )
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr and "Exception ignored" not in r.stderr
    assert r.stderr.splitlines()[-1] == (
        f"kant {' '.join(argv[:2]) if argv[0] == 'bench' else argv[0]}: "
        "cannot write the output: standard output is closed"
    )


def test_a_closed_stdout_and_stderr_is_exit_code_2_saying_nothing(tmp_path: Path) -> None:
    # (the message meant for stderr went to the closed stdout: exit code 1)
    def close_both() -> None:
        os.close(1)
        os.close(2)

    r = subprocess.run(
        [sys.executable, "-m", "kant", "packing", "--list-policies"],
        check=False,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])},
        preexec_fn=close_both,
    )
    assert r.returncode == 2


@pytest.mark.parametrize("out", ["dang", "loop", "dangdir/o"])
@pytest.mark.parametrize("option", ["--out", "--plot"])
def test_an_output_through_a_symbolic_link_to_nothing_is_refused_before_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], out: str, option: str
) -> None:
    # (a link to nothing passed as a new name: the run ran, then "--out dang: cannot write:
    # File exists (the run finished; its results are printed above)")
    # (a file is made through a link to a name that does not exist, in a folder that does:
    # the plot's link points into a folder that does not exist)
    ext = ".png" if option == "--plot" else ""
    for link, to in ((f"dang{ext}", f"nowhere{'/x.png' if ext else ''}"),
                     (f"loop{ext}", f"loop{ext}"), ("dangdir", "nowhere/sub")):  # fmt: skip
        (tmp_path / link).symlink_to(tmp_path / to)
    target = str(tmp_path / out) + ext
    argv = ["packing", "--seeds", "1", option, target]
    if option == "--out":
        argv = ["simulate", "--scenario", "inference", "--jobs", "5", "--no-plots", "--quiet",
                option, target]  # fmt: skip
    with pytest.raises(SystemExit) as e:  # (argparse's: the option refused)
        main(argv)
    assert e.value.code == 2
    got, err = capsys.readouterr()
    assert got == "" and "a symbolic link to nothing" in err.splitlines()[-1], err
    assert "Traceback" not in err
