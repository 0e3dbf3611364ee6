"""A file saved with a UTF-8 byte order mark (as spreadsheet tools and some editors save a CSV
or a JSON file) reads as the same file without it: every trace format, a JSON cluster file
and a JSON sweep grid. The mark counts only at the very start of a file."""

from __future__ import annotations

import gzip
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kant.errors import InvalidClusterFileError, InvalidTraceError
from kant.sim.traces.inference import load_spot_nodes
from kant.sim.traces.openb import load_openb_jobs, load_openb_nodes
from kant.sim.traces.philly import load_philly_jobs
from kant.sim.traces.swf import load_swf_jobs
from kant.sweep import load_grid
from kant.topology import load_cluster

BOM = "\ufeff".encode()

FILES: list[tuple[str, str, bytes, Callable[[Path], Any]]] = [
    (
        "a Philly table",
        "philly.csv",
        b"timestamp,duration,num_gpus,gpu_time,cluster\r\n2017-10-03 02:54:00,10,8,80,vc1\r\n",
        lambda p: load_philly_jobs(p).jobs,
    ),
    (
        "an openb pod list",
        "openb.csv",
        b"name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\np0,1000,1024,1,1000,\n",
        lambda p: load_openb_jobs(p).jobs,
    ),
    (
        "an openb node list",
        "nodes.csv",
        b"sn,cpu_milli,memory_mib,gpu,model\nn0,96000,100000,8,V100M32\n",
        lambda p: load_openb_nodes(p),
    ),
    (
        "a spot node list",
        "spot.csv",
        b"gpu_model,gpu_capacity_num,cpu_num,node_name\nA10,1,8,n0\n",
        lambda p: load_spot_nodes(p).shapes,
    ),
    (
        "an SWF log starting with a comment",
        "log.swf",
        b"; MaxProcs: 16\n1 0 0 100 4 -1 -1 4 100 -1 1 1 1 1 1 -1 -1 -1\n",
        lambda p: load_swf_jobs(p).jobs,
    ),
    (
        "an SWF log starting with a record",
        "bare.swf",
        b"1 0 0 100 4 -1 -1 4 100 -1 1 1 1 1 1 -1 -1 -1\n",
        lambda p: load_swf_jobs(p).jobs,
    ),
    (
        "a JSON cluster file",
        "cluster.json",
        b'{"version": 1, "nodes": [{"name": "n0", "gpu_model": "H100", "gpus": 8}]}',
        lambda p: load_cluster(p).nodes,
    ),
    (
        "a JSON sweep grid",
        "grid.json",
        b'{"command": "simulate", "options": {"scenario": "inference", "jobs": 20}}',
        lambda p: load_grid(p).runs(),
    ),
]


@pytest.mark.parametrize(("what", "name", "data", "load"), FILES, ids=[f[0] for f in FILES])
def test_a_file_starting_with_a_byte_order_mark_reads_as_the_same_file_without_it(
    tmp_path: Path, what: str, name: str, data: bytes, load: Callable[[Path], Any]
) -> None:
    plain, marked = tmp_path / "plain", tmp_path / "marked"
    plain.mkdir()
    marked.mkdir()
    (plain / name).write_bytes(data)
    (marked / name).write_bytes(BOM + data)
    expected = load(plain / name)
    assert expected, what
    got = load(marked / name)
    if what.endswith("sweep grid"):  # (a run names the grid's folder: compare what else)
        got, expected = [r.params for r in got], [r.params for r in expected]
    assert got == expected, what


def test_a_gzip_swf_log_starting_with_a_byte_order_mark_reads_as_without_it(
    tmp_path: Path,
) -> None:
    data = b"; MaxProcs: 16\n1 0 0 100 4 -1 -1 4 100 -1 1 1 1 1 1 -1 -1 -1\n"
    (tmp_path / "a.swf.gz").write_bytes(gzip.compress(data))
    (tmp_path / "b.swf.gz").write_bytes(gzip.compress(BOM + data))
    assert load_swf_jobs(tmp_path / "b.swf.gz").jobs == load_swf_jobs(tmp_path / "a.swf.gz").jobs


def test_a_cluster_file_starting_with_a_byte_order_mark_names_the_line_of_bytes_not_utf8(
    tmp_path: Path,
) -> None:
    p = tmp_path / "c.json"
    p.write_bytes(BOM + b'{"version": 1,\n"nodes": [\xff]}')
    with pytest.raises(InvalidClusterFileError, match=r"c\.json:2: .*byte 28"):
        load_cluster(p)


def test_a_byte_order_mark_after_the_first_line_is_still_a_bad_row(tmp_path: Path) -> None:
    p = tmp_path / "philly.csv"
    p.write_bytes(
        b"timestamp,duration,num_gpus,gpu_time,cluster\n"
        + BOM
        + b"2017-10-03 02:54:00,10,8,80,vc1\n"
    )
    with pytest.raises(InvalidTraceError, match=r":2: .*timestamp"):
        load_philly_jobs(p)


@pytest.mark.parametrize("mark", [BOM, b""], ids=["marked", "plain"])
def test_a_csv_files_bad_byte_on_its_first_line_is_named_by_its_offset_in_the_line(
    tmp_path: Path, mark: bytes
) -> None:
    # "name,cpu" is 8 bytes: the bad byte is byte 11 of the marked line, as the file has it
    line = mark + b"name,cpu\xff\n"
    p = tmp_path / "openb.csv"
    p.write_bytes(line)
    at = line.index(b"\xff")
    with pytest.raises(InvalidTraceError, match=rf":1: .*at byte {at}\)"):
        load_openb_jobs(p)
