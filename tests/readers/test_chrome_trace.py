"""Reader paths and edge cases, on tiny hand-written traces."""

from __future__ import annotations

import gzip
import threading
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from tests.builders import (
    HEADER,
    cpu_op,
    gpu_op,
    kernel,
    kineto_bytes,
    launch,
    step,
    write_trace,
)
from traceanalyzer.errors import TraceFormatError, UnsupportedTraceError
from traceanalyzer.model import EVENT_SCHEMA
from traceanalyzer.readers import chrome_trace, read

EVENTS = [
    step(1, 100.0, 50.0),
    cpu_op(
        101.0,
        5.0,
        "aten::mm",
        **{"Input Dims": [[8, 16], [16, 4]], "Input type": ["float", "float"]},
    ),
    launch(102.0, 3.0, corr=1),
    kernel(110.0, 10.5, "gemm_a", corr=1, grid=[4, 1, 1], block=[128, 1, 1]),
    launch(106.0, 2.0, corr=2, name="cudaMemcpyAsync"),
    gpu_op("gpu_memcpy", 121.0, 2.0, "Memcpy HtoD (Pageable -> Device)", corr=2, bytes=4096),
    kernel(115.0, 20.0, "other_stream", stream=13),
]


def _events(path: Path) -> pl.DataFrame:
    return read(path).events.sort("start_ns", "kind", "name")


def test_schema_and_values(tmp_path: Path) -> None:
    tl = read(write_trace(tmp_path / "t.json", EVENTS))
    assert tl.events.schema == EVENT_SCHEMA
    k = tl.events.filter(pl.col("name") == "gemm_a").row(0, named=True)
    assert (k["start_ns"], k["end_ns"], k["device"], k["stream"]) == (110_000, 120_500, 0, 7)
    assert (k["correlation"], k["grid"], k["block"], k["pid"]) == (1, [4, 1, 1], [128, 1, 1], None)
    mm = tl.events.filter(pl.col("name") == "aten::mm").row(0, named=True)
    assert (
        mm["input_dims"] == "[[8,16],[16,4]]"
        or mm["input_dims"].replace(" ", "") == "[[8,16],[16,4]]"
    )
    assert (mm["pid"], mm["tid"], mm["device"]) == (100, 100, None)
    cp = tl.events.filter(pl.col("kind") == "memcpy").row(0, named=True)
    assert cp["bytes"] == 4096
    assert tl.meta.devices[0].name == "NVIDIA H100 80GB HBM3"
    assert tl.meta.ranks[0].rank_source == "default"


@pytest.mark.parametrize("layout", ["compact", "array"])
def test_layouts_read_the_same(tmp_path: Path, layout: str) -> None:
    fast = _events(write_trace(tmp_path / "k.json", EVENTS))
    other = _events(write_trace(tmp_path / f"{layout}.json", EVENTS, layout=layout))
    assert other.equals(fast)


def test_gzip_is_recognised_by_magic_not_suffix(tmp_path: Path) -> None:
    plain = _events(write_trace(tmp_path / "a.json", EVENTS))
    gz_named_json = _events(write_trace(tmp_path / "b.json", EVENTS, gzip=True))
    plain_named_gz = _events(write_trace(tmp_path / "c.json.gz", EVENTS))
    assert gz_named_json.equals(plain)
    assert plain_named_gz.equals(plain)


def test_small_blocks_give_the_same_events(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    many = [kernel(1000.0 + i * 3, 1.0 + (i % 5), f"k{i % 7}", corr=i) for i in range(300)]
    path = write_trace(tmp_path / "m.json", many)
    whole = _events(path)
    monkeypatch.setattr(chrome_trace, "BLOCK_BYTES", 333)
    assert _events(path).equals(whole)
    assert whole.height == 300


def test_float_ns_timestamps_are_exact(tmp_path: Path) -> None:
    evs = [
        kernel(4476047788645.790, 1.001, "a"),
        kernel(1.5, 0.002, "b"),
        kernel(1610366662254362, 397, "c"),
        kernel(0, 63.813, "d"),  # ts written below as exact text: a float64 cannot hold it
        kernel(0, 0.25, "e"),
    ]
    evs[3]["ts"], evs[4]["ts"] = "TS_D", "TS_E"
    data = kineto_bytes(evs).replace(b'"TS_D"', b"1712195495519689.047")
    data = data.replace(b'"TS_E"', b"1712195495519689.5")
    path = tmp_path / "f.json"
    path.write_bytes(data)
    tl = read(path)
    names = tl.events["name"].cast(pl.String)
    got = dict(zip(names, tl.events["start_ns"], strict=True))
    assert got == {
        "a": 4476047788645790,
        "b": 1500,
        "c": 1610366662254362000,
        "d": 1712195495519689047,
        "e": 1712195495519689500,
    }
    dur = dict(zip(names, tl.events["end_ns"] - tl.events["start_ns"], strict=True))
    assert dur == {"a": 1001, "b": 2, "c": 397000, "d": 63813, "e": 250}


def test_zero_length_and_overlapping_streams(tmp_path: Path) -> None:
    evs = [
        kernel(10.0, 0.0, "zero"),
        kernel(10.0, 5.0, "s7", stream=7),
        kernel(12.0, 5.0, "s13", stream=13),
    ]
    tl = read(write_trace(tmp_path / "z.json", evs))
    assert tl.events.height == 3
    assert tl.events.filter(pl.col("name") == "zero")["end_ns"].item() == 10_000


def test_old_2021_schema(tmp_path: Path) -> None:
    """Capitalised categories, string tids, `external id` in lower case."""
    evs = [
        {
            "ph": "X",
            "cat": "Operator",
            "name": "ProfilerStep#5",
            "pid": 1,
            "tid": "189",
            "ts": 100,
            "dur": 50,
            "args": {"Input dims": [], "external id": 1},
        },
        {
            "ph": "X",
            "cat": "Runtime",
            "name": "cudaLaunchKernel",
            "pid": 1,
            "tid": "189",
            "ts": 101,
            "dur": 2,
            "args": {"correlation": 7, "external id": 1},
        },
        {
            "ph": "X",
            "cat": "Kernel",
            "name": "volta_sgemm_128x64_nn",
            "pid": 0,
            "tid": "stream 7",
            "ts": 105,
            "dur": 10,
            "args": {"correlation": 7, "external id": 1},
        },
        {
            "ph": "X",
            "cat": "Memset",
            "name": "Memset (Device)",
            "pid": 0,
            "tid": "stream 7",
            "ts": 116,
            "dur": 1,
            "args": {"device": 0, "stream": 7},
        },
    ]
    tl = read(write_trace(tmp_path / "old.json", evs, header={"schemaVersion": 1}, trailer={}))
    k = tl.events.filter(pl.col("kind") == "kernel").row(0, named=True)
    assert (k["device"], k["stream"], k["correlation"], k["external_id"]) == (0, 7, 7, 1)
    assert tl.events.filter(pl.col("kind") == "cpu_op")["tid"].item() == 189
    assert set(tl.events["kind"].cast(pl.String)) == {"cpu_op", "runtime", "kernel", "memset"}


def test_rocm_hex_stream_and_missing_args(tmp_path: Path) -> None:
    evs = [
        {
            "ph": "X",
            "cat": "kernel",
            "name": "amd",
            "pid": 2,
            "tid": 1,
            "ts": 5,
            "dur": 1,
            "args": {"stream": "0x1f", "correlation": 3},
        },
        {"ph": "X", "cat": "kernel", "name": "bare", "pid": 1, "tid": 9, "ts": 6, "dur": 1},
    ]
    ev = read(write_trace(tmp_path / "r.json", evs)).events.sort("name")
    assert ev.select("name", "device", "stream").rows() == [("amd", 2, 31), ("bare", 1, 9)]


def test_unknown_categories_and_sentinels_are_counted(tmp_path: Path) -> None:
    evs = [
        *EVENTS,
        {
            "ph": "X",
            "cat": "cuda_profiler_range",
            "name": "r",
            "pid": 0,
            "tid": 0,
            "ts": 1,
            "dur": 1,
        },
        kernel(0, 1, "zero_ts"),
        {"ph": "X", "cat": "kernel", "name": "no_dur", "pid": 0, "tid": 7, "ts": 3},
        {
            "ph": "X",
            "cat": "Trace",
            "name": "PyTorch Profiler (0)",
            "pid": 0,
            "tid": 0,
            "ts": 1,
            "dur": 500,
        },
        {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 0, "tid": 0, "ts": 1},
    ]
    tl = read(write_trace(tmp_path / "u.json", evs))
    assert tl.meta.quality.dropped == {
        "category cuda_profiler_range": 1,
        "zero timestamp": 1,
        "missing ts or dur": 1,
    }
    assert tl.events.height == len(EVENTS)


def test_metadata_after_the_events_is_read(tmp_path: Path) -> None:
    trailer = {
        "deviceProperties": [{"id": 0, "name": "NVIDIA B200"}],
        "distributedInfo": {"rank": 3, "world_size": 8},
    }
    tl = read(
        write_trace(
            tmp_path / "t.json", EVENTS, header={"metadata": {"x": [1, {"y": 2}]}}, trailer=trailer
        )
    )
    assert tl.meta.devices[0].name == "NVIDIA B200"
    assert (tl.meta.ranks[0].rank, tl.meta.ranks[0].rank_source) == (3, "distributedInfo")
    assert set(tl.events["rank"]) == {3}


def test_truncated_trace_keeps_whole_events(tmp_path: Path) -> None:
    data = kineto_bytes(EVENTS)
    cut = data[: data.index(b'"other_stream"') + 5]
    path = tmp_path / "cut.json"
    path.write_bytes(cut)
    tl = read(path)
    assert tl.meta.quality.truncated
    assert tl.events.height == len(EVENTS) - 1
    assert "cut off" in tl.meta.quality.notes[0]
    gz = tmp_path / "cut.json.gz"
    gz.write_bytes(gzip.compress(data)[:-40])
    tl2 = read(gz)
    assert tl2.meta.quality.truncated
    assert 0 < tl2.events.height <= len(EVENTS)


@pytest.mark.parametrize(
    ("content", "error", "words"),
    [
        (b"", TraceFormatError, "empty"),
        (b"   \n", TraceFormatError, "empty"),
        (b"hello world", UnsupportedTraceError, "none of the formats"),
        (b'{"foo": 1, "bar": [1, 2]}', TraceFormatError, "no traceEvents"),
        (b'{"foo": 1, "bar": [1, 2', TraceFormatError, "not valid JSON"),
        (b'{"traceEvents": {"ph": "X"}}', TraceFormatError, "traceEvents is not a list"),
        (b'{"traceEvents": ', TraceFormatError, "cut off"),
        (
            b'{"traceEvents": [{"ph": "X"}, 7, {"ph": "X"}]}',
            TraceFormatError,
            "not an array of event objects",
        ),
        (b'\xef\xbb\xbf{"foo": 1}', TraceFormatError, "no traceEvents"),
        (b"SQLite format 3\x00" + b"\x00" * 100, TraceFormatError, "not a readable SQLite"),
    ],
)
def test_bad_files(tmp_path: Path, content: bytes, error: type[Exception], words: str) -> None:
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    with pytest.raises(error) as info:
        read(path)
    assert words in str(info.value)
    assert str(path) in str(info.value)


def test_missing_path_and_empty_folder(tmp_path: Path) -> None:
    with pytest.raises(TraceFormatError, match="no such file"):
        read(tmp_path / "nope.json")
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "notes.txt").write_text("not a trace")
    with pytest.raises(TraceFormatError, match="no readable Chrome trace files"):
        read(tmp_path / "d")


def test_folder_of_ranks(tmp_path: Path) -> None:
    write_trace(tmp_path / "job" / "a.json", EVENTS, trailer={"distributedInfo": {"rank": 1}})
    write_trace(
        tmp_path / "job" / "b.json.gz", EVENTS, gzip=True, trailer={"distributedInfo": {"rank": 0}}
    )
    tl = read(tmp_path / "job")
    assert sorted(set(tl.events["rank"])) == [0, 1]
    assert {(r.rank, r.rank_source) for r in tl.meta.ranks} == {
        (0, "distributedInfo"),
        (1, "distributedInfo"),
    }
    write_trace(tmp_path / "named" / "worker0.json", EVENTS)
    write_trace(tmp_path / "named" / "worker1.json", EVENTS)
    tl2 = read(tmp_path / "named")
    assert {(r.rank, r.rank_source) for r in tl2.meta.ranks} == {(0, "file name"), (1, "file name")}


def test_folder_rank_conflicts(tmp_path: Path) -> None:
    write_trace(tmp_path / "dup" / "rank0.json", EVENTS)
    write_trace(tmp_path / "dup" / "x_rank0.json", EVENTS)
    with pytest.raises(TraceFormatError, match="two files claim rank 0"):
        read(tmp_path / "dup")
    write_trace(tmp_path / "anon" / "a.json", EVENTS)
    write_trace(tmp_path / "anon" / "b.json", EVENTS)
    with pytest.raises(TraceFormatError, match="cannot tell the ranks apart"):
        read(tmp_path / "anon")


def test_input_is_never_modified(tmp_path: Path) -> None:
    path = write_trace(tmp_path / "t.json", EVENTS)
    before = (path.read_bytes(), path.stat().st_mtime_ns)
    read(path)
    assert (path.read_bytes(), path.stat().st_mtime_ns) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.json"]


def test_misleading_separator_falls_back_to_the_structural_splitter(tmp_path: Path) -> None:
    """An array of objects printed at the events' own indentation looks like a separator."""
    data = kineto_bytes(EVENTS)
    nested = (
        b'{\n    "ph": "X", "cat": "cpu_op", "name": "tricky", "pid": 100, "tid": 100,'
        b' "ts": 130.0, "dur": 1.0, "args": {"list": [{"a": 1},\n  {"b": 2}]}\n  },\n  '
    )
    at = data.index(b"{", data.index(b'"traceEvents"'))
    path = tmp_path / "nested.json"
    path.write_bytes(data[:at] + nested + data[at:])
    tl = read(path)
    assert tl.events.height == len(EVENTS) + 1
    assert "tricky" in tl.events["name"].cast(pl.String).to_list()


def test_windows_line_endings_and_odd_indentation(tmp_path: Path) -> None:
    fast = _events(write_trace(tmp_path / "k.json", EVENTS))
    crlf = tmp_path / "crlf.json"
    crlf.write_bytes(kineto_bytes(EVENTS).replace(b"\n", b"\r\n"))
    assert _events(crlf).equals(fast)
    odd = tmp_path / "odd.json"
    odd.write_bytes(kineto_bytes(EVENTS).replace(b"},\n  {", b"},\n      {", 2))
    assert _events(odd).equals(fast)


def test_ids_written_as_text_after_numeric_blocks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A later block that writes ids as text is re-parsed, and ids stay exact."""
    evs = [kernel(1000.0 + i, 0.5, "k", corr=i) for i in range(50)]
    evs += [
        {
            "ph": "X",
            "cat": "kernel",
            "name": "rocm",
            "pid": 3,
            "tid": 1,
            "ts": 2000,
            "dur": 1,
            "args": {"device": 3, "stream": "0x2a", "correlation": 99},
        }
    ]
    monkeypatch.setattr(chrome_trace, "BLOCK_BYTES", 400)
    ev = read(write_trace(tmp_path / "t.json", evs)).events
    assert ev.filter(pl.col("name") == "rocm").select("device", "stream").row(0) == (3, 42)
    assert ev.filter(pl.col("name") == "k")["stream"].unique().to_list() == [7]


def test_damaged_middle_is_refused_not_mistaken_for_a_cut(tmp_path: Path) -> None:
    data = kineto_bytes(EVENTS)
    at = data.index(b'"aten::mm"')
    path = tmp_path / "damaged.json"
    path.write_bytes(data[:at] + b"@@@" + data[at:])
    with pytest.raises(TraceFormatError, match="malformed and more events follow"):
        read(path)


def test_args_lifted_or_kept_read_the_same(tmp_path: Path) -> None:
    """Args objects the splitter cannot lift (empty, not last, on one line) read the same."""
    head = kineto_bytes(EVENTS).split(b'"traceEvents": [')[0] + b'"traceEvents": [\n'
    body = [
        # Kineto's layout: lifted
        b'  {\n    "ph": "X", "cat": "kernel", "name": "k1", "pid": 0, "tid": 7,'
        b' "ts": 10.0, "dur": 1.0,\n    "args": {\n      "stream": 7, "correlation": 1,'
        b' "grid": [2, 1, 1], "device": 0\n    }\n  }',
        # args not the last key: kept, read by the slower path
        b'  {\n    "ph": "X", "cat": "kernel", "name": "k2", "pid": 0, "tid": 7,'
        b' "ts": 12.0,\n    "args": {\n      "stream": 7, "correlation": 2, "grid": [3, 1, 1],'
        b' "device": 0\n    },\n    "dur": 1.0\n  }',
        # empty args, and args on the key's own line
        b'  {\n    "ph": "X", "cat": "cpu_op", "name": "op", "pid": 1, "tid": 1,'
        b' "ts": 9.0, "dur": 5.0,\n    "args": {\n    }\n  }',
        b'  {\n    "ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1,'
        b' "tid": 1, "ts": 9.5, "dur": 0.5,\n    "args": {"correlation": 2, "External id": 4}\n  }',
        # a Triton op's text grid is not a launch size
        b'  {\n    "ph": "X", "cat": "cpu_op", "name": "triton_op", "pid": 1, "tid": 1,'
        b' "ts": 9.6, "dur": 0.1,\n    "args": {\n      "grid": "grid(100,)"\n    }\n  }',
    ]
    path = tmp_path / "args.json"
    path.write_bytes(head + b",\n".join(body) + b"\n  ]\n}\n")
    ev = read(path).events.sort("start_ns")
    rows = {r["name"]: r for r in ev.iter_rows(named=True)}
    k1 = rows["k1"]
    assert (k1["grid"], k1["correlation"], k1["stream"]) == ([2, 1, 1], 1, 7)
    assert (rows["k2"]["grid"], rows["k2"]["correlation"], rows["k2"]["end_ns"]) == (
        [3, 1, 1],
        2,
        13_000,
    )
    assert rows["op"]["external_id"] is None
    assert (rows["cudaLaunchKernel"]["correlation"], rows["cudaLaunchKernel"]["external_id"]) == (
        2,
        4,
    )
    assert rows["triton_op"]["grid"] is None


def test_lift_args_rewrites_in_place_keeping_the_length() -> None:
    import numpy as np

    from traceanalyzer.readers.json_scan import lift_args

    line = b'{ "ph": "X", "dur": 1, "args": {\n  "stream": 7, "x": [1]\n }\n}'
    arr = np.frombuffer(bytearray(line), dtype=np.uint8)
    newlines = np.flatnonzero(arr == 10)
    arr[newlines] = 32
    lift_args(arr, np.array([len(line) - 1]), newlines)
    text = arr.tobytes()
    assert len(text) == len(line)
    assert text.split() == b'{ "ph": "X", "dur": 1, "stream": 7, "x": [1] }'.split()


def test_a_block_is_rewritten_in_a_bytes_object_and_parsed_as_it_is() -> None:
    """Kineto's blocks are copied into a new bytes object, rewritten there (the same bytes
    as a bytearray's rewrite) and parsed without another copy: what follows the last event
    is blanked, which the NDJSON parser skips."""
    from traceanalyzer.readers.chrome_fields import Fields, parse_block
    from traceanalyzer.readers.json_scan import SPACE, WritableBytes, rewrite

    sep = b"},\n  {"
    events = [
        b'{\n    "ph": "X", "cat": "kernel", "name": "k%d", "pid": 0, "tid": 7,\n'
        b'    "ts": 1712195495519689.047, "dur": 3.5,\n    "args": {\n'
        b'      "External id": %d, "stream": 7, "correlation": %d\n    }\n  }' % (i, i, i)
        for i in range(3)
    ]
    block = sep.join(e[1:-1] for e in events).join([b"{", sep]) + b'"ph": "X", "cut'
    window = bytearray(block)
    size = len(block) - len(b'"ph": "X", "cut')
    by_bytearray = bytearray(window[:size])
    exact = rewrite(by_bytearray, size, sep)
    copied = WritableBytes(window, size)
    assert isinstance(copied.data, bytes) and copied.data == bytes(window[:size])
    assert rewrite(copied, size, sep) is exact is True
    end = size - len(sep) + 1
    assert copied.data == bytes(by_bytearray)
    copied.view[end:] = SPACE
    raw, _fields, _texts = parse_block(copied.data, Fields(), exact)
    assert raw["name"].cast(str).to_list() == ["k0", "k1", "k2"]
    assert raw["tn"].to_list() == [1712195495519689047] * 3
    assert raw["External id"].to_list() == [0, 1, 2]


def test_flow_events_are_blanked_without_changing_the_events(tmp_path: Path) -> None:
    """Flow arrows (ph s/f) are folded into the line before them; every event stays."""

    def flow(ph: str, ts: float, i: int) -> dict[str, object]:
        return {"ph": ph, "id": i, "pid": 100, "tid": 100, "ts": ts, "cat": "ac2g", "name": "f"}

    with_flows: list[dict[str, object]] = [flow("s", 100.5, 0)]
    for i, ev in enumerate(EVENTS):
        with_flows += [ev, flow("s", 101.0 + i, i), flow("f", 110.0 + i, i)]
    plain = _events(write_trace(tmp_path / "plain.json", EVENTS))
    flows = _events(write_trace(tmp_path / "flows.json", with_flows))
    assert flows.equals(plain)


def _memory_event(ts: float, total: int) -> dict[str, object]:
    return {
        "ph": "i",
        "cat": "cpu_instant_event",
        "s": "t",
        "name": "[memory]",
        "pid": 100,
        "tid": 100,
        "ts": ts,
        "args": {"Total Allocated": total, "Device Id": 0, "Device Type": 1, "Bytes": 512},
    }


def _comm_kernel(ts: float, corr: int, name: str) -> dict[str, object]:
    ev = kernel(ts, 2.0, name, corr=corr)
    ev["args"].update({"Collective name": "allreduce", "In msg nelems": 1024, "dtype": "Float"})
    return ev


@pytest.mark.parametrize("block", [400, 1 << 20])
@pytest.mark.parametrize("header", [None, {"distributedInfo": {"rank": 0, "world_size": 2}}])
def test_fields_parsed_once_the_file_shows_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, block: int, header: dict[str, object] | None
) -> None:
    """Memory and collective fields first seen deep in a file (after blocks without them)
    are read as if they had been parsed from the start, with or without `distributedInfo`."""
    evs = [kernel(1000.0 + i, 0.5, f"k{i % 3}", corr=i) for i in range(60)]
    evs += [_memory_event(2000.0, 4096), _comm_kernel(2001.0, 500, "ncclDevKernel_AllReduce")]
    evs += [kernel(3000.0 + i, 0.5, "late", corr=600 + i) for i in range(20)]
    evs += [_memory_event(4000.0, 8192), _comm_kernel(4001.0, 700, "ncclDevKernel_AllGather")]
    monkeypatch.setattr(chrome_trace, "BLOCK_BYTES", block)
    path = tmp_path / "t.json"
    path.write_bytes(kineto_bytes(evs, header={**HEADER, **(header or {})}))
    ev = read(path).events
    mem = ev.filter(pl.col("kind") == "memory").sort("start_ns")
    assert mem.select("bytes", "device").rows() == [(4096, 0), (8192, 0)]
    comm = ev.filter(pl.col("name").cast(pl.String).str.starts_with("nccl")).sort("start_ns")
    assert comm.select(pl.col("collective").cast(pl.String), "msg_nelems").rows() == [
        ("allreduce", 1024),
        ("allreduce", 1024),
    ]
    assert comm["msg_dtype"].cast(pl.String).to_list() == ["Float", "Float"]
    assert ev.filter(pl.col("kind") == "kernel").height == 82


def test_a_tn_key_the_splitter_did_not_write_is_not_a_timestamp(tmp_path: Path) -> None:
    """`tn` is the splitter's own key for exact ns: another producer's `tn` field is ignored."""
    evs = [kernel(1000.0 + i, 0.5, "k", corr=i) for i in range(5)]
    evs[2]["tn"] = evs[4]["tn"] = 5  # one in a block, one in the tail
    ev = read(write_trace(tmp_path / "t.json", evs)).events.sort("start_ns")
    assert ev["start_ns"].to_list() == [1_000_000, 1_001_000, 1_002_000, 1_003_000, 1_004_000]


@pytest.mark.parametrize("block", [400, 1 << 20])
def test_args_objects_left_in_place_deep_in_a_file_are_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, block: int
) -> None:
    """Blocks whose args objects were all lifted are parsed without the `args` column; a
    later event whose args stay in place (on one line) is still read in full."""
    evs = [kernel(1000.0 + i, 0.5, "k", corr=i) for i in range(40)]
    head = kineto_bytes(evs).split(b"\n  ]")[0]
    late = (
        b',\n  {\n    "ph": "X", "cat": "kernel", "name": "late", "pid": 0, "tid": 7,'
        b' "ts": 5000.0, "dur": 1.0,\n    "args": {"stream": 9, "correlation": 77,'
        b' "grid": [5, 1, 1], "device": 0, "External id": 3}\n  }'
        b',\n  {\n    "ph": "X", "cat": "cpu_op", "name": "late_op", "pid": 1, "tid": 1,'
        b' "ts": 4999.0, "dur": 3.0,\n    "args": {"External id": 3,'
        b' "Input Dims": [[2, 3]], "Input type": ["float"]}\n  }'
    )
    tail = [kernel(6000.0 + i, 0.5, "after", corr=100 + i) for i in range(3)]
    rest = kineto_bytes(tail).split(b'"traceEvents": [')[1]
    path = tmp_path / "t.json"
    path.write_bytes(head + late + b"," + rest.lstrip(b"\n"))
    monkeypatch.setattr(chrome_trace, "BLOCK_BYTES", block)
    ev = read(path).events
    rows = {r["name"]: r for r in ev.iter_rows(named=True)}
    late_row = rows["late"]
    assert (late_row["stream"], late_row["correlation"], late_row["grid"]) == (9, 77, [5, 1, 1])
    assert late_row["external_id"] == 3
    assert rows["late_op"]["external_id"] == 3
    assert rows["late_op"]["input_dims"].replace(" ", "") == "[[2,3]]"
    assert ev.filter(pl.col("name") == "after").height == 3
    assert ev.filter(pl.col("name") == "k")["correlation"].sort().to_list() == list(range(40))


def test_rank_folder_names_every_file_it_cannot_read(tmp_path: Path) -> None:
    """An empty rank file, a corrupt gzip and a JSON file that is not a trace beside the ranks:
    each is named in data_quality and a trace_quality warning; the readable ranks are read."""
    import shutil

    from tests.conftest import SAMPLES
    from traceanalyzer import api

    job = tmp_path / "job"
    shutil.copytree(SAMPLES / "sampled_2rank", job)
    (job / "rank2.json.gz").write_bytes(b"")
    (job / "rank3.json.gz").write_bytes(b"\x1f\x8b\x08\x00garbage")
    (job / "config.json").write_text('{"lr": 0.1}')
    rep = api.report(job)
    skipped = rep.quality["skipped_files"]
    assert sorted(s.split(":")[0] for s in skipped) == [
        "config.json",
        "rank2.json.gz",
        "rank3.json.gz",
    ]
    assert [r["rank"] for r in rep.ranks] == [0, 1]
    quality = [f for f in rep.findings if f.rule == "TA012" and "could not be read" in f.message]
    assert quality and quality[0].severity.value == "warning"


def _deep() -> dict[str, object]:
    ev = cpu_op(130.0, 1.0, "deep")
    ev["args"] = {"x": "DEEP"}
    return ev


@pytest.mark.parametrize("layout", ["kineto", "compact"])
@pytest.mark.parametrize("pair", ["{}", "[]"])
def test_args_nested_very_deep_are_one_clear_error(tmp_path: Path, layout: str, pair: str) -> None:
    from click.testing import CliRunner

    from traceanalyzer.cli import cli

    opener = '{"a": ' if pair == "{}" else "["
    deep = (opener * 100_000 + "1" + pair[1] * 100_000).encode()
    data = kineto_bytes([*EVENTS, _deep(), *EVENTS], layout=layout)
    path = tmp_path / "deep.json"
    path.write_bytes(data.replace(b'"DEEP"', deep))
    with pytest.raises(TraceFormatError, match="nests objects or lists too deeply"):
        read(path)
    result = CliRunner().invoke(cli, ["report", str(path), "--format", "json"])
    assert result.exit_code == 2
    assert "error:" in result.output and "Traceback" not in result.output
    cut = tmp_path / "cut.json"  # cut off inside the deep value: the events before it stay
    cut.write_bytes(path.read_bytes()[: data.index(b'"DEEP"') + 50_000])
    tl = read(cut)
    assert tl.meta.quality.truncated
    assert tl.events.height == len(EVENTS)


@pytest.mark.parametrize("layout", ["compact", "crlf"])
def test_truncated_trace_of_another_layout_keeps_whole_events(tmp_path: Path, layout: str) -> None:
    data = kineto_bytes(EVENTS, layout="compact" if layout == "compact" else "kineto")
    data = data.replace(b"\n", b"\r\n") if layout == "crlf" else data
    path = tmp_path / "cut.json"
    path.write_bytes(data[: data.index(b'"other_stream"') + 5])
    tl = read(path)
    assert tl.meta.quality.truncated
    assert tl.events.height == len(EVENTS) - 1


def test_utf8_and_utf16_byte_order_marks_are_read(tmp_path: Path) -> None:
    import codecs

    from traceanalyzer.readers import detect

    data = kineto_bytes(EVENTS)
    plain = _events(write_trace(tmp_path / "plain.json", EVENTS))
    for name, encoded in {
        "bom8.json": codecs.BOM_UTF8 + data,
        "le.json": codecs.BOM_UTF16_LE + data.decode().encode("utf-16-le"),
        "be.json.gz": gzip.compress(codecs.BOM_UTF16_BE + data.decode().encode("utf-16-be")),
    }.items():
        path = tmp_path / name
        path.write_bytes(encoded)
        assert detect(path).name == "chrome", name
        assert _events(path).equals(plain), name
    odd = tmp_path / "odd.json"  # UTF-16 cut off after half a code unit
    odd.write_bytes(codecs.BOM_UTF16_LE + data.decode().encode("utf-16-le")[:-1])
    assert read(odd).meta.quality.truncated


def _parallel_cases() -> list[Path]:
    """Real traces whose optional fields show up after their first blocks: memory events,
    collectives, Python stacks, text ids (ROCm)."""
    from tests.conftest import SAMPLES

    gpu = Path(__file__).resolve().parents[1] / "data" / "gpu"
    cases = [
        gpu / "leak.json.gz",
        gpu / "grad_scaler_fp16.json.gz",
        SAMPLES / "sampled_2rank" / "sampled_rank-1.json.gz",
        SAMPLES / "train_bf16_healthy.json.gz",
    ]
    rocm = SAMPLES.parent.parent / "shared" / "traces" / "public" / "tracelens_rocm"
    cases += sorted(rocm.glob("*.json.gz"))[:1]
    return [c for c in cases if c.is_file()]


@pytest.mark.parametrize("path", _parallel_cases(), ids=lambda p: p.name)
def test_blocks_read_at_once_equal_blocks_read_in_turn(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Blocks rewritten, parsed and normalised on several threads at once (each with the
    fields the file had shown when it was handed out, parsed again where an earlier block
    showed more: from `SPECULATE_FROM` workers, from the file's start and on the workers)
    give the events and counts of reading them one after the other."""
    monkeypatch.setattr(chrome_trace, "BLOCK_BYTES", 64 << 10)  # fields show up block by block
    parse = chrome_trace._parse
    again: list[str] = []  # the threads that parsed a block again

    def counted(ndjson: bytes, *args: Any) -> Any:
        if ndjson in seen:
            again.append(threading.current_thread().name)
        seen.add(ndjson)
        return parse(ndjson, *args)

    seen: set[bytes] = set()
    monkeypatch.setattr(chrome_trace, "_parse", counted)
    got = {}
    for workers in (1, 6):
        seen.clear()
        again.clear()
        monkeypatch.setattr(chrome_trace, "read_workers", lambda w=workers: w)
        got[workers] = chrome_trace.read_file(path)
    assert chrome_trace.SPECULATE_FROM <= 6
    # blocks handed out before an earlier one showed more fields are parsed again on the
    # workers, never one by one on the main thread (this trace shows some while six are out)
    assert all(name.startswith("read") for name in again)
    assert again or path.name != "grad_scaler_fp16.json.gz"
    one, many = got[1], got[6]
    assert len(one.frames) > 10
    assert many.fields == one.fields
    assert (many.dropped, many.notes, many.truncated) == (one.dropped, one.notes, one.truncated)
    assert len(many.frames) == len(one.frames)  # the same blocks whatever the workers
    for a, b in zip(one.frames, many.frames, strict=True):
        assert a.equals(b)


def test_gzip_is_inflated_ahead_and_the_thread_ends_with_the_source(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A gzip file is decompressed on a thread of its own, a few chunks ahead; the bytes are
    the file's, in order, and closing the source early ends the thread."""
    import random

    from traceanalyzer.readers.base import ByteSource

    rng = random.Random(0)
    data = b"".join(b'{"i": %d, "pad": "%x"}\n' % (i, rng.getrandbits(256)) for i in range(100_000))
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(data, compresslevel=1))
    with ByteSource(path) as src:
        out = bytearray()
        buf = bytearray(1 << 20)
        while got := src.readinto(memoryview(buf)):
            out += buf[:got]
        assert src._thread is not None
    assert bytes(out) == data and not src.truncated
    assert len(path.read_bytes()) > 3 << 20  # many chunks
    monkeypatch.setattr(ByteSource, "AHEAD", 1)  # the thread waits on a full queue
    with ByteSource(path) as early:
        early.readinto(memoryview(bytearray(10)))
        thread = early._thread
        assert thread is not None and thread.is_alive()
    assert not thread.is_alive()


@pytest.mark.parametrize("layout", ["empty_members_first", "empty_members_between", "long_name"])
def test_gzip_chunks_that_decompress_to_nothing_do_not_end_the_data(
    tmp_path: Path, layout: str
) -> None:
    """Compressed input that decompresses to nothing in a valid stream (a chunk's worth of
    empty gzip members before or between the trace's halves, a file-name header longer than
    a chunk) is read past: the events are those of the plain file, not cut off."""
    import struct
    import zlib

    from traceanalyzer.readers.base import ByteSource

    evs = [kernel(1000.0 + i, 0.5, f"k{i % 5}", corr=i) for i in range(3000)]
    plain = write_trace(tmp_path / "plain.json", evs)
    data = plain.read_bytes()
    empty = gzip.compress(b"", mtime=0)
    chunk = ByteSource.CHUNK
    empties = empty * (chunk // len(empty) + 10)
    half = len(data) // 2
    if layout == "empty_members_first":
        packed = empties + gzip.compress(data, mtime=0)
    elif layout == "empty_members_between":
        packed = gzip.compress(data[:half], mtime=0) + empties + gzip.compress(data[half:])
    else:
        deflate = zlib.compressobj(9, zlib.DEFLATED, -15)
        body = deflate.compress(data) + deflate.flush()
        head = b"\x1f\x8b\x08\x08\0\0\0\0\0\xff" + b"n" * (chunk + 1000) + b"\0"
        packed = head + body + struct.pack("<II", zlib.crc32(data), len(data))
    path = tmp_path / "t.json.gz"
    path.write_bytes(packed)
    assert gzip.decompress(packed) == data
    got, want = read(path), read(plain)
    assert not got.meta.quality.truncated_files
    assert got.events.drop("rank").equals(want.events.drop("rank"))


def test_the_blocks_frames_become_one_frame_of_whole_columns() -> None:
    """`_contiguous`: the frames of many blocks (each of several pieces) as one frame whose
    every column is in one piece, with the same rows in the same order, and the blocks'
    frames let go (their pieces are freed column by column)."""
    blocks = [
        pl.concat(
            [
                pl.DataFrame({"a": [b * 10 + i, b * 10 + i + 5], "s": [f"x{b}{i}", None]})
                for i in range(3)
            ],
            rechunk=False,
        )
        for b in range(5)
    ]
    assert all(frame.n_chunks() == 3 for frame in blocks)
    expected = pl.concat(blocks, rechunk=True)
    part = chrome_trace.Parsed(path=Path("t.json"), header={}, frames=list(blocks))
    events = chrome_trace._contiguous(part)
    assert events.equals(expected)
    assert [events[c].n_chunks() for c in events.columns] == [1, 1]
    assert events["a"].to_list()[:4] == [0, 5, 1, 6]
    assert part.frames == []
