"""Corrupt trace and cluster files give typed errors naming the file and line (issue 17,
items 7, 8 and 10), in both error modes."""

from __future__ import annotations

import errno
import gzip
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kant.errors import InvalidClusterFileError, InvalidTraceError
from kant.sim.traces.inference import load_pai_machines, load_spot_nodes
from kant.sim.traces.openb import load_openb_jobs, openb_nodes
from kant.sim.traces.philly import load_philly_jobs
from kant.sim.traces.swf import load_swf_jobs
from kant.topology import load_cluster

PHILLY_HEAD = b"timestamp,duration,num_gpus,gpu_time,cluster\n"
PHILLY_ROW = b"2017-10-03 02:54:00,10,8,80,vc1\n"
OPENB_HEAD = b"name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"
OPENB_ROW = b"p0,1000,1024,1,1000,,LS,Running,0,100,1\n"


def _swf(n: int) -> bytes:
    rows = (f"{i} {i * 10} 0 100 4 -1 -1 4 100 -1 1 1 1 1 1 -1 -1 -1\n" for i in range(1, n))
    return b"; MaxProcs: 16\n" + "".join(rows).encode()


def _write(tmp_path: Path, name: str, data: bytes) -> Path:
    p = tmp_path / name
    p.write_bytes(data)
    return p


@pytest.mark.parametrize("mode", ["raise", "skip"])
@pytest.mark.parametrize(
    ("name", "data", "load", "line"),
    [
        ("philly.csv", PHILLY_HEAD + PHILLY_ROW + b"2017-10-03,1,\xff\xfe,1,vc\n", load_philly_jobs, 3),
        ("openb.csv", OPENB_HEAD + OPENB_ROW + b"p\xff,1,1,1,1000,,LS,Running,0,100,1\n", load_openb_jobs, 3),
        ("huge.csv", PHILLY_HEAD + b"2017-10-03 02:54:00,1," + b"1" * 200_000 + b",1,vc\n", load_philly_jobs, 2),
        ("quote.csv", PHILLY_HEAD + PHILLY_ROW + b'2017-10-03 02:54:00,1,"8,1,vc\n' + PHILLY_ROW * 5000, load_philly_jobs, 0),
        ("spot.csv", b"gpu_model,gpu_capacity_num,cpu_num,node_name\nA10,1,8,n0\nA\xff,1,8,n1\n", load_spot_nodes, 3),
    ],
    ids=["philly non-UTF-8", "openb non-UTF-8", "field over 128 KiB", "unbalanced quote",
         "spot node list non-UTF-8"],
)  # fmt: skip
def test_a_corrupt_csv_trace_is_an_invalid_trace_error_naming_file_and_line(
    tmp_path: Path, name: str, data: bytes, load: Callable[..., Any], line: int, mode: str
) -> None:
    p = _write(tmp_path, name, data)
    try:
        trace = load(p, errors=mode)
    except InvalidTraceError as e:
        assert e.where is not None and e.where.startswith(f"{p}:")
        if line:  # the line is exact for a bad line, the one reached for a runaway quote
            assert e.where == f"{p}:{line}"
        return
    assert mode == "skip"  # a bad line is a skipped row; the good ones are loaded
    assert [e.where for e in trace.report.errors] == [f"{p}:{line}"]
    assert len(getattr(trace, "jobs", getattr(trace, "shapes", ()))) == 1


def test_a_non_utf8_openb_node_list_is_an_invalid_trace_error(tmp_path: Path) -> None:
    p = _write(tmp_path, "nodes.csv", b"sn,cpu_milli,memory_mib,gpu,model\nn\xff,1,1,0,\n")
    with pytest.raises(InvalidTraceError) as e:
        openb_nodes(p)
    assert e.value.where == f"{p}:2"


@pytest.mark.parametrize("mode", ["raise", "skip"])
@pytest.mark.parametrize("damage", ["truncated", "corrupt"])
def test_a_damaged_gzip_swf_log_is_an_invalid_trace_error(
    tmp_path: Path, damage: str, mode: str
) -> None:
    g = bytearray(gzip.compress(_swf(3000)))
    if damage == "truncated":
        g = g[: len(g) // 2]
    else:
        g[-6] ^= 0xFF  # the CRC / length trailer
    p = _write(tmp_path, "log.swf.gz", bytes(g))
    with pytest.raises(InvalidTraceError, match="compressed data") as e:
        load_swf_jobs(p, errors=mode)
    assert e.value.where is not None and e.value.where.startswith(f"{p}:")


@pytest.mark.parametrize("mode", ["raise", "skip"])
def test_a_philly_row_no_cluster_could_hold_is_refused(tmp_path: Path, mode: str) -> None:
    p = _write(tmp_path, "philly.csv", PHILLY_HEAD + PHILLY_ROW + b"2017-10-03 02:54:00,10,999999999999,1,vc1\n")  # fmt: skip
    try:
        trace = load_philly_jobs(p, errors=mode)
    except InvalidTraceError as e:
        assert e.where == f"{p}:3" and e.field == "num_gpus"
        return
    assert mode == "skip" and len(trace.jobs) == 1 and trace.report.skipped == 1


def test_a_cluster_file_that_is_not_utf8_is_an_invalid_cluster_file(tmp_path: Path) -> None:
    p = _write(tmp_path, "c.json", b'{"nodes": [],\n "x\xff": 1}')
    with pytest.raises(InvalidClusterFileError) as e:
        load_cluster(p)
    assert e.value.where == f"{p}:2"


def test_a_deeply_nested_cluster_file_is_an_invalid_cluster_file(tmp_path: Path) -> None:
    p = _write(tmp_path, "c.json", b"[" * 100_000 + b"]" * 100_000)
    with pytest.raises(InvalidClusterFileError, match="nested too deeply"):
        load_cluster(p)


def test_a_yaml_key_given_twice_in_one_node_is_refused(tmp_path: Path) -> None:
    pytest.importorskip("yaml")
    text = b"nodes:\n  - name: a\n    gpu_model: H100\n    gpus: 8\n    gpus: 4\n"
    p = _write(tmp_path, "c.yaml", text)
    with pytest.raises(InvalidClusterFileError, match="'gpus' twice") as e:
        load_cluster(p)
    assert e.value.where == f"{p}:5"


def test_a_json_key_given_twice_is_refused(tmp_path: Path) -> None:
    p = _write(tmp_path, "c.json", b'{"nodes": [{"name": "a", "gpus": 8, "gpus": 4}]}')
    with pytest.raises(InvalidClusterFileError, match="'gpus' is given twice"):
        load_cluster(p)


def test_a_node_too_large_for_the_columns_in_a_cluster_file_is_refused(tmp_path: Path) -> None:
    text = b'{"version": 1, "nodes": [{"name": "a", "gpu_model": "H100", "gpus": 8, "cpu_milli": 9223372036854775808}]}'
    p = _write(tmp_path, "c.json", text)
    with pytest.raises(InvalidClusterFileError, match="cpu_milli"):
        load_cluster(p)


HUGE = b"9" * 5000  # (more digits than Python turns into an int)


@pytest.mark.parametrize("mode", ["raise", "skip"])
@pytest.mark.parametrize(
    ("name", "data", "load", "field"),
    [
        ("gpus.csv", PHILLY_HEAD + PHILLY_ROW + b"2017-10-03 02:54:00,10," + b"9" * 400 + b",1,vc1\n", load_philly_jobs, "num_gpus"),
        ("gpus2.csv", PHILLY_HEAD + PHILLY_ROW + b"2017-10-03 02:54:00,10," + HUGE + b",1,vc1\n", load_philly_jobs, "num_gpus"),
        ("cpu.csv", OPENB_HEAD + OPENB_ROW + b"p1," + HUGE + b",1024,1,1000,,LS,Running,0,100,1\n", load_openb_jobs, "cpu_milli"),
        ("job.swf", _swf(2) + HUGE + b" 0 0 100 4 -1 -1 4 100 -1 1 1 1 1 1 -1 -1 -1\n", load_swf_jobs, "job_number"),
        ("procs.swf", _swf(2) + b"7 0 0 100 " + b"9" * 400 + b" -1 -1 4 100 -1 1 1 1 1 1 -1 -1 -1\n", load_swf_jobs, "allocated_processors"),
    ],
    ids=["philly 400-digit gpus", "philly 5000-digit gpus", "openb 5000-digit cpu",
         "swf 5000-digit job number", "swf 400-digit processors"],
)  # fmt: skip
def test_a_number_too_long_for_any_count_is_a_bad_row(
    tmp_path: Path, name: str, data: bytes, load: Callable[..., Any], field: str, mode: str
) -> None:
    p = _write(tmp_path, name, data)
    try:
        trace = load(p, errors=mode)
    except InvalidTraceError as e:
        assert e.field == field and len(str(e)) < 1500  # (a long value is named, not printed)
        return
    assert mode == "skip" and len(trace.jobs) == 1 and trace.report.skipped == 1


def test_an_swf_line_that_is_not_utf8_is_a_bad_row(tmp_path: Path) -> None:
    p = _write(
        tmp_path, "latin.swf", _swf(3) + b"9 0 0 100 4 -1 -1 4 100 -1 1 1 1 \xe9 -1 -1 -1 -1\n"
    )
    trace = load_swf_jobs(p, errors="skip")
    assert len(trace.jobs) == 2 and trace.report.errors[0].where == f"{p}:4"


def test_a_philly_header_naming_a_column_twice_is_refused(tmp_path: Path) -> None:
    p = _write(tmp_path, "dup.csv", PHILLY_HEAD.rstrip(b"\n") + b",duration\n" + PHILLY_ROW)
    with pytest.raises(InvalidTraceError, match="twice"):
        load_philly_jobs(p)


def test_an_openb_node_list_skips_a_line_of_spaces(tmp_path: Path) -> None:
    p = _write(tmp_path, "nodes.csv", b"sn,cpu_milli,memory_mib,gpu,model\nn0,1000,1024,0,\n   \n")
    assert len(openb_nodes(p).nodes) == 1


def test_a_cluster_file_group_of_too_many_nodes_is_refused_before_it_is_built(
    tmp_path: Path,
) -> None:
    p = _write(
        tmp_path, "big.yaml", b"version: 1\ngroups:\n- {count: 100000000, prefix: n, gpus: 0}\n"
    )
    with pytest.raises(InvalidClusterFileError, match="250,000"):
        load_cluster(p)


@pytest.mark.parametrize("mode", ["raise", "skip"])
@pytest.mark.parametrize("end", [b"\n", b""], ids=["newline", "no newline"])
@pytest.mark.parametrize("after", [0, 1, 30], ids=["last line", "one line after", "30 lines after"])
def test_a_quote_left_open_to_the_end_of_a_short_file_is_an_error_naming_its_line(
    tmp_path: Path, mode: str, end: bytes, after: int
) -> None:
    # (under the 128 KiB field limit, skip mode read the rest of the file as one bad row and
    # loaded the jobs before it only: 5 jobs of 30, silently)
    bad = b'2017-10-03 02:54:00,1,"8,1,vc\n'
    data = PHILLY_HEAD + PHILLY_ROW * 5 + bad + PHILLY_ROW * after
    p = _write(tmp_path, "philly.csv", data[:-1] + end)
    with pytest.raises(InvalidTraceError, match="quote") as e:
        load_philly_jobs(p, errors=mode)
    assert e.value.where == f"{p}:7", e.value


@pytest.mark.parametrize("end", [b"\n", b""], ids=["newline", "no newline"])
def test_an_open_quotes_line_is_right_when_the_last_line_is_not_utf8(
    tmp_path: Path, end: bytes
) -> None:
    # (skipping a last line that is not UTF-8 without a newline, the quote's line was one off:
    # the line read in its place ends with one)
    bad = b'2017-10-03 02:54:00,1,"8,1,vc\n'
    p = _write(
        tmp_path, "philly.csv", PHILLY_HEAD + PHILLY_ROW + bad + PHILLY_ROW + b"\xff\xfe" + end
    )
    with pytest.raises(InvalidTraceError, match="quote") as e:
        load_philly_jobs(p, errors="skip")
    assert e.value.where == f"{p}:3", e.value


@pytest.mark.parametrize("end", [b"\n", b""], ids=["newline", "no newline"])
def test_quotes_that_close_are_read_to_the_last_line(tmp_path: Path, end: bytes) -> None:
    last = b'2017-10-03 02:55:00,10,8,80,"vc2"' + end
    p = _write(tmp_path, "philly.csv", PHILLY_HEAD + b'"2017-10-03 02:54:00",10,8,80,vc1\n' + last)
    trace = load_philly_jobs(p)
    assert len(trace.jobs) == 2 and trace.report.rows == 2


def test_a_read_that_fails_midway_is_a_trace_error_naming_the_file_and_line(
    tmp_path: Path,
) -> None:
    # (an OSError while reading, EIO from a failing device, reached the command line as a
    # nameless "cannot write the output")
    from kant.sim.traces.common import CsvFile

    p = tmp_path / "t.csv"

    def lines() -> Any:
        yield PHILLY_HEAD
        yield PHILLY_ROW
        raise OSError(errno.EIO, "Input/output error")

    with pytest.raises(InvalidTraceError, match="cannot be read: Input/output error") as e:
        list(CsvFile(lines(), p, None))
    assert e.value.where == f"{p}:3"


@pytest.mark.parametrize("mode", ["raise", "skip"])
@pytest.mark.parametrize(
    ("name", "data", "load"),
    [
        ("philly.csv", PHILLY_HEAD + PHILLY_ROW, load_philly_jobs),
        ("openb.csv", OPENB_HEAD + OPENB_ROW, load_openb_jobs),
        ("nodes.csv", b"sn,cpu_milli,memory_mib,gpu,model\nn0,8000,1024,8,V100\n", openb_nodes),
        ("pai.csv", b"m0,V100,96,512,8\n", load_pai_machines),
    ],
    ids=["philly", "openb pods", "openb nodes", "pai machines (no header)"],
)
def test_a_gzip_compressed_csv_trace_is_refused_as_such_in_both_modes(
    tmp_path: Path, name: str, data: bytes, load: Callable[..., Any], mode: str
) -> None:
    # only SWF logs are read compressed: a CSV trace that is a gzip file was blamed on its
    # first line's bytes, as a header of no columns with errors="skip" (PAI's machine list,
    # which has no header, loaded as an empty inventory of 2,622 bad rows)
    p = _write(tmp_path, name + ".gz", gzip.compress(data))
    kwargs = {} if load is openb_nodes else {"errors": mode}
    with pytest.raises(InvalidTraceError, match="gzip-compressed") as e:
        load(p, **kwargs)
    assert e.value.where == f"{p}:1"


@pytest.mark.parametrize(
    ("data", "load"),
    [
        (PHILLY_HEAD.replace(b"cluster", b"clust\xe9r") + PHILLY_ROW, load_philly_jobs),
        (OPENB_HEAD.replace(b"qos", b"q\xf6s") + OPENB_ROW, load_openb_jobs),
        (b"gpu_model,gpu_capacity_num,cpu_num,node_n\xe4me\nA10,1,8,n0\n", load_spot_nodes),
    ],
    ids=["philly", "openb pods", "spot nodes"],
)
def test_a_header_that_is_not_utf8_is_refused_as_such_when_skipping(
    tmp_path: Path, data: bytes, load: Callable[..., Any]
) -> None:
    # a bad header makes the file unusable in both modes; skipped as a bad row, it was
    # reported as a header of no columns (field 'header' = [])
    p = _write(tmp_path, "latin1.csv", data)
    with pytest.raises(InvalidTraceError, match="not UTF-8") as e:
        load(p, errors="skip")
    assert e.value.where == f"{p}:1"


@pytest.mark.parametrize("mode", ["raise", "skip"])
def test_a_csv_trace_whose_lines_end_in_a_bare_carriage_return_is_told_so(
    tmp_path: Path, mode: str
) -> None:
    # (lines ended by CR alone, as a spreadsheet saves a CSV for classic Mac OS): the error
    # was Python's own hint, "do you need to open the file in universal-newline mode?"
    p = _write(tmp_path, "mac.csv", (PHILLY_HEAD + PHILLY_ROW * 3).replace(b"\n", b"\r"))
    with pytest.raises(InvalidTraceError, match="bare carriage return") as e:
        load_philly_jobs(p, errors=mode)
    assert "universal-newline" not in str(e.value) and "newline=" not in str(e.value)
    assert e.value.where == f"{p}:1"
