"""Every JSON layout of a trace reads the same: differential tests on real traces, and the
structural splitter against `json.loads` on random events full of edge cases."""

from __future__ import annotations

import codecs
import gzip
import io
import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import SAMPLES, corpus
from traceanalyzer import api
from traceanalyzer.readers import read
from traceanalyzer.readers.json_stream import StructuralSplitter
from traceanalyzer.render import RENDERERS


def _shuffled(value: Any, rng: random.Random) -> Any:
    """`value` with the keys of every object in a random order."""
    if isinstance(value, dict):
        items = list(value.items())
        rng.shuffle(items)
        return {k: _shuffled(v, rng) for k, v in items}
    if isinstance(value, list):
        return [_shuffled(v, rng) for v in value]
    return value


#: Layout -> rewrite of the original (Kineto-indented) bytes.
LAYOUTS: dict[str, Callable[[bytes], bytes]] = {
    "minified": lambda data: json.dumps(json.loads(data)).encode(),
    "compact": lambda data: json.dumps(json.loads(data), separators=(",", ":")).encode(),
    "crlf": lambda data: data.replace(b"\n", b"\r\n"),
    "bom": lambda data: codecs.BOM_UTF8 + data,
    "utf16le": lambda data: codecs.BOM_UTF16_LE + data.decode().encode("utf-16-le"),
    "utf16be": lambda data: codecs.BOM_UTF16_BE + data.decode().encode("utf-16-be"),
    "indent2": lambda data: json.dumps(json.loads(data), indent=2).encode(),
    # jq's `.`: two-space indentation, non-ASCII text unescaped, then CRLF for good measure
    "jq_crlf": lambda data: (
        json.dumps(json.loads(data), indent=2, ensure_ascii=False).encode().replace(b"\n", b"\r\n")
    ),
    "tabs": lambda data: json.dumps(json.loads(data), indent="\t").encode(),
    "shuffled": lambda data: json.dumps(_shuffled(json.loads(data), random.Random(15))).encode(),
    "shuffled_indent2_bom": lambda data: (
        codecs.BOM_UTF8
        + json.dumps(_shuffled(json.loads(data), random.Random(16)), indent=2).encode()
    ),
}

#: Real traces of the shared corpus with shapes the samples lack: Python stacks and
#: collectives (B200), ids as text and ROCm (MI300), the 2021 schema (ResNet-50).
CORPUS_TRACES = (
    "public/tracelens/b200_eager_rank0/eager_trace.json.gz",
    "public/tracelens_rocm/mi300__gaunernst_bert-small-uncased__1016001.json.gz",
    "public/kineto/resnet50_v1_schema/worker0.pt.trace.json.gz",
    "public/hta/sampled_2rank/sampled_rank-0.json.gz",
)


def _traces() -> list[Path]:
    found = corpus()
    samples = [SAMPLES / "train_bf16_healthy.json.gz", SAMPLES / "tiny_kernels.json.gz"]
    return samples + ([found / t for t in CORPUS_TRACES] if found else [])


def _json_report(folder: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The JSON report of `folder/trace.json`, read by its relative name."""
    monkeypatch.chdir(folder)
    out = io.StringIO()
    RENDERERS["json"].render(api.report(Path("trace.json")), out)
    return out.getvalue()


@pytest.mark.parametrize("trace", _traces(), ids=lambda p: p.name.removesuffix(".json.gz"))
def test_every_layout_gives_the_same_report(
    trace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = gzip.decompress(trace.read_bytes())
    (tmp_path / "original").mkdir()
    (tmp_path / "original" / "trace.json").write_bytes(data)
    expected = _json_report(tmp_path / "original", monkeypatch)
    for name, rewrite in LAYOUTS.items():
        folder = tmp_path / name
        folder.mkdir()
        (folder / "trace.json").write_bytes(rewrite(data))
        assert _json_report(folder, monkeypatch) == expected, name


def test_small_blocks_of_every_layout_read_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Blocks far smaller than an event: every cut lands mid-event, mid-string, mid-escape."""
    from traceanalyzer.readers import chrome_trace

    data = gzip.decompress((SAMPLES / "train_bf16_healthy.json.gz").read_bytes())
    head = json.loads(data)
    head["traceEvents"] = head["traceEvents"][:400]
    small = json.dumps(head, indent=1).encode()
    expected = read(_write(tmp_path / "o.json", small)).events
    monkeypatch.setattr(chrome_trace, "BLOCK_BYTES", 997)
    for name in ("minified", "crlf", "utf16le", "shuffled"):
        got = read(_write(tmp_path / f"{name}.json", LAYOUTS[name](small))).events
        assert got.equals(expected), name


@pytest.mark.parametrize("fake", [False, True], ids=["plain", "fake_separators"])
def test_guessed_cuts_read_what_one_pass_reads(
    fake: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A layout other than Kineto's is cut where two events seem to meet and each block split
    on a worker; the events are those of the Kineto-indented original. Where `}, {` also
    sits inside strings and nested lists of objects, a cut lands there, the block before it
    does not end whole, and the file is read again in one pass: the same events."""
    from traceanalyzer.readers import chrome_trace

    doc = json.loads(gzip.decompress((SAMPLES / "train_bf16_healthy.json.gz").read_bytes()))
    doc["traceEvents"] = doc["traceEvents"][:3000]
    if fake:
        for event in doc["traceEvents"]:
            event.setdefault("args", {})["note"] = '"}, {"ph": "X"} , {'
            event["args"]["items"] = [{"a": 1}, {"b": [{"c": 2}, {}]}]
    expected = read(_write(tmp_path / "o.json", json.dumps(doc, indent=1).encode())).events
    passes: list[bool] = []
    read_file = chrome_trace._read_file
    monkeypatch.setattr(chrome_trace, "BLOCK_BYTES", 16 << 10)
    monkeypatch.setattr(chrome_trace, "read_workers", lambda: 4)
    monkeypatch.setattr(
        chrome_trace, "_read_file", lambda p, kineto: passes.append(kineto) or read_file(p, kineto)
    )
    guessed: list[int] = []
    split_whole = StructuralSplitter.split_whole
    monkeypatch.setattr(
        StructuralSplitter,
        "split_whole",
        lambda self, buf: guessed.append(1) or split_whole(self, buf),
    )
    for name in ("minified", "compact", "crlf", "shuffled"):
        passes.clear()
        guessed.clear()
        data = LAYOUTS[name](json.dumps(doc, indent=1).encode())
        assert len(data) > 40 * (16 << 10)  # many blocks
        got = read(_write(tmp_path / f"{name}.json", data)).events
        assert got.equals(expected), name
        assert passes == ([True, False] if fake else [True]), name
        assert len(guessed) > (0 if fake else 10), name  # blocks split on the workers


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


# ------------------------------------------------------------ the splitter vs json.loads

#: Strings that trip a naive splitter: quotes, backslash runs before quotes, braces and
#: brackets, separators, unicode escapes and raw UTF-8, an `"args"` that is not a key.
_NASTY = [
    "",
    "plain",
    'say "hi"',
    "ends in a backslash \\",
    "two \\\\ backslashes \\\\\\",
    '\\"',
    "}, {",
    '"}, {"ph": "X"',
    "{[}]",
    "]",
    '"args": {',
    "args",
    "tab\there, newline\nthere, cr\r",
    "é ü 漢字 😀",
    "\u2028\u2029",
    "ctrl \x01\x1f",
]


def _text(rng: random.Random) -> str:
    return "".join(rng.choice(_NASTY) for _ in range(rng.randint(1, 3)))


def _value(rng: random.Random, depth: int) -> Any:
    kind = rng.randrange(7 if depth < 4 else 4)
    if kind == 0:
        return rng.randint(-(10**12), 10**12)
    if kind == 1:
        return round(rng.uniform(-1e6, 1e6), 3)
    if kind == 2:
        return _text(rng)
    if kind == 3:
        return rng.choice([True, False, None])
    if kind == 4:
        return [_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    if kind == 5:
        return {_text(rng) + str(i): _value(rng, depth + 1) for i in range(rng.randint(0, 3))}
    return [{"a": _value(rng, depth + 1)}, {"b": {}}]  # objects in a list: `}, {` inside


def _event(rng: random.Random, i: int) -> dict[str, Any]:
    ev: dict[str, Any] = {
        "ph": rng.choice(["X", "X", "i", "M", "s", "f"]),
        "cat": rng.choice(["kernel", "cpu_op", _text(rng)]),
        "name": _text(rng),
        "pid": rng.randint(0, 9),
        "tid": i,
        "ts": round(rng.uniform(0, 1e9), 3),
    }
    shape = rng.randrange(4)
    if shape == 1:
        ev["args"] = {}
    elif shape >= 2:
        ev["args"] = {f"k{j} {_text(rng)}": _value(rng, 2) for j in range(rng.randint(1, 4))}
    items = list(ev.items())
    if rng.random() < 0.5:  # keys in any order; the splitter may not assume Kineto's
        rng.shuffle(items)
    return dict(items)


_BLANKS = [" ", "  ", "\n", "\r\n", "\t", "\n    ", ""]


def _dump(value: Any, rng: random.Random) -> str:
    """`value` as JSON with random blanks between tokens (as many layouts as a seed gives)."""

    def gap() -> str:
        return rng.choice(_BLANKS) if rng.random() < 0.6 else ""

    if isinstance(value, dict):
        items = [
            f"{gap()}{json.dumps(k, ensure_ascii=rng.random() < 0.5)}{gap()}:{gap()}"
            f"{_dump(v, rng)}{gap()}"
            for k, v in value.items()
        ]
        return "{" + ",".join(items) + (gap() if not items else "") + "}"
    if isinstance(value, list):
        return "[" + ",".join(f"{gap()}{_dump(v, rng)}{gap()}" for v in value) + "]"
    return json.dumps(value, ensure_ascii=rng.random() < 0.5)


def _split_all(data: bytes, rng: random.Random) -> tuple[list[bytes], bytes]:
    """Feed `data` (what follows `[`) to the splitter in random pieces, as the reader's
    window does; the NDJSON blocks and what is left after the last whole event."""
    splitter = StructuralSplitter()
    buf, pos, blocks = bytearray(), 0, []
    while True:
        step = rng.choice([1, 7, 64, 500, 5000])
        buf += data[pos : pos + step]
        pos += step
        cut = splitter.split_in_place(buf, len(buf))
        if cut is not None:
            end, rest = cut
            blocks.append(bytes(buf[:end]))
            del buf[:rest]
        if pos >= len(data):
            cut = splitter.split_in_place(buf, len(buf))
            if cut is not None:
                blocks.append(bytes(buf[: cut[0]]))
                del buf[: cut[1]]
            return blocks, bytes(buf)


def _lifted(ev: dict[str, Any]) -> dict[str, Any]:
    """What the splitter makes of an event: its args fields lifted into it."""
    args = ev.get("args")
    if not args:
        return ev
    out = {k: v for k, v in ev.items() if k != "args"}
    return {**out, **args}


def _flow(ev: dict[str, Any]) -> bool:
    """A flow event led by its `ph` key: the splitter may blank it (it is never read)."""
    return ev["ph"] in ("s", "f") and next(iter(ev)) == "ph"


@pytest.mark.parametrize("seed", range(40))
def test_structural_splitter_agrees_with_json_loads(seed: int) -> None:
    rng = random.Random(seed)
    events = [_event(rng, i) for i in range(rng.randint(0, 60))]
    text = _dump({"traceEvents": events, "after": {"x": [1, {"y": "]"}]}}, rng)
    data = text.encode()
    assert json.loads(data)["traceEvents"] == events  # the generator writes valid JSON
    body = data[data.index(b"[") + 1 :]
    blocks, rest = _split_all(body, rng)
    lines = [line for block in blocks for line in block.split(b"\n") if line.strip()]
    expected = [_lifted(e) for e in events if not _flow(e)]
    # an args object the splitter left in place (say, an event named "args") is read by a
    # slower path: lifted or not, the fields must be the same
    got = [json.loads(line) for line in lines]
    assert [_lifted(e) for e in got if not _flow(e)] == expected
    kept = sum(bool(e.get("args")) for e in got)
    assert kept <= sum("args" in json.dumps(e).replace('"args":', "") for e in events)
    assert json.loads(b"{" + rest.lstrip(b" \t\r\n,").lstrip(b"]").lstrip(b" \t\r\n,")) == {
        "after": {"x": [1, {"y": "]"}]}
    }


def test_a_cut_off_array_keeps_its_whole_events() -> None:
    rng = random.Random(1)
    events = [{"ph": "X", "name": f'e{i} "}}', "args": {"a": [i, {"b": "{"}]}} for i in range(9)]
    data = json.dumps(events).encode()
    for cut in range(1, len(data)):
        blocks, _rest = _split_all(data[1:cut], rng)
        whole = [json.loads(ln) for b in blocks for ln in b.split(b"\n") if ln.strip()]
        assert whole == [_lifted(e) for e in events][: len(whole)]
        assert len(whole) == data[:cut].count(b"]}}")
