"""Chrome reader, field discovery: which of an event's fields are parsed, and how.

Each field of the schema costs parse time in every event, present or not, so optional field
groups (memory events, collectives, args objects the splitter did not lift, text ids) are
parsed only once the file shows them; `Parsed` is what the file has shown so far, and
`parse_ndjson` parses a block again when it shows more.
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from traceanalyzer.readers.chrome_normalise import CONV_OP_NAME, KIND_BY_CAT, Frame


def arg_fields(text_ids: bool) -> dict[str, pl.DataType]:
    """The `args` fields the model needs; every other field is skipped by the parser.

    Ids and places are numbers in current Kineto and are parsed as such (`text_ids=False`);
    some producers write them as text (`"tid": "stream 7"` in 2021, `"stream": "0x0"` on
    ROCm), and a block that does is parsed with them as text (`text_ids=True`). Memory
    events, collectives, convolutions' arguments and the 2021 key names (`external id`,
    `Input dims`) are among them. Every field costs parse time in every event, present or
    not: the optional groups (`MEMORY_FIELDS`, `COMM_FIELDS`, `CONV_FIELDS`) are left out
    until a file shows them (`parse_ndjson`).
    """
    ident = pl.String() if text_ids else pl.Int64()
    return {
        "device": ident,
        "stream": ident,
        "correlation": pl.Int64(),
        "External id": pl.Int64(),
        "grid": pl.String(),  # `[x, y, z]`, decoded for the few events that carry it
        "block": pl.String(),
        "bytes": pl.Int64(),
        "registers per thread": pl.Int64(),
        "shared memory": pl.Int64(),
        "Input Dims": pl.String(),
        "Input type": pl.String(),
        # the scalar arguments of an operator (`["", "", "", "[2, 2]", ...]`), as JSON text:
        # a convolution's stride, padding, dilation (see CONV_FIELDS)
        "Concrete Inputs": pl.String(),
        "Total Allocated": pl.Int64(),
        "Total Reserved": pl.Int64(),
        "Device Id": pl.Int64(),
        "Device Type": pl.Int64(),
        "Collective name": pl.String(),
        "In msg nelems": pl.Int64(),
        "dtype": pl.String(),
        "external id": pl.Int64(),
        "Input dims": pl.String(),
    }


def raw_schema(text_ids: bool, text_times: bool = False) -> pl.Schema:
    """The fields parsed from each event: its own, and those of its `args` object.

    The splitter lifts the args fields of Kineto's events into the event itself
    (`json_scan.lift_args`), so they parse as plain fields. An event whose args object was
    not lifted (another producer's layout, the exact scanner's events) keeps it, read here
    as its JSON text, and `_merge_args` parses those few into the same columns.
    """
    ident = pl.String() if text_ids else pl.Int64()
    return pl.Schema(
        {
            "ph": pl.String(),
            "cat": pl.String(),
            "name": pl.Categorical(),
            "pid": ident,
            "tid": ident,
            # a converter may write them as JSON text (`"ts": "1712.5"`): a block that does
            # is parsed with them as text, read as numbers by the normaliser
            "ts": pl.String() if text_times else pl.Float64(),
            "tn": pl.Int64(),  # exact ns, see json_scan.exact_timestamps
            "dur": pl.String() if text_times else pl.Float64(),
            **arg_fields(text_ids),
            "args": pl.String(),  # costs nothing where absent
        }
    )


#: Fields that only some traces carry (memory events, collectives), only some blocks (`tn`,
#: written by the splitter) or only other producers' layouts (`args`, an object the
#: splitter did not lift): each field of the schema costs parse time in every event,
#: present or not (together these cost about 15 % of the parse of a trace without them),
#: so they are parsed only once the file shows them (see `parse_ndjson`).
MEMORY_FIELDS = ("Total Allocated", "Total Reserved", "Device Id", "Device Type")


COMM_FIELDS = ("Collective name", "In msg nelems", "dtype")


#: The scalar arguments torch.profiler records with the shapes (torch 2.1 and later): the
#: model keeps them for convolutions only (their stride, padding and dilation give the
#: output's size, see analyses/gpu/flops.py), so they are parsed once a file shows one.
CONV_FIELDS = ("Concrete Inputs",)


#: Event names that may carry the collectives' fields (NCCL/RCCL/oneCCL kernels, c10d's
#: `record_param_comms`, Gloo): a file without `distributedInfo` parses them once it shows one.
_COMM_NAME = (
    r"(?i)ccl|gloo|comm|c10d|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|broadcast"
)


def read_ndjson(
    ndjson: bytes, text_ids: bool, skip: frozenset[str] = frozenset(), text_times: bool = False
) -> pl.DataFrame:
    """Parse NDJSON events into the raw schema; fields in `skip` are not parsed (all null)."""
    schema = raw_schema(text_ids, text_times)
    if not skip:
        raw = pl.read_ndjson(ndjson, schema=schema, ignore_errors=True)
        return _merge_args(raw, text_ids)
    lean = pl.Schema({k: v for k, v in schema.items() if k not in skip})
    raw = (
        pl.read_ndjson(ndjson, schema=lean, ignore_errors=True)
        .with_columns(pl.lit(None, schema[k]).alias(k) for k in skip)
        .select(schema.names())
    )
    return _merge_args(raw, text_ids)


def _merge_args(raw: pl.DataFrame, text_ids: bool) -> pl.DataFrame:
    """Parse the args objects that were not lifted into the same columns as lifted ones."""
    kept = raw.get_column("args")
    raw = raw.drop("args")
    if kept.null_count() == kept.len():
        return raw
    rows = kept.is_not_null()
    fields = arg_fields(text_ids)
    texts = "\n".join(kept.filter(rows).to_list()).encode()
    indexed = raw.with_row_index("_row")
    parsed = pl.read_ndjson(texts, schema=fields, ignore_errors=True).with_columns(
        indexed.get_column("_row").filter(rows)
    )
    return (
        indexed.join(parsed, on="_row", how="left", suffix="_kept", maintain_order="left")
        .with_columns(pl.coalesce(f, f"{f}_kept").alias(f) for f in fields)
        .drop("_row", *(f"{f}_kept" for f in fields))
    )


#: A timestamp or duration written as a JSON string (`"ts": "1712.5"`).
TEXT_TIME = re.compile(rb'"(?:ts|dur)"\s*:\s*"')
#: The pseudo-reason under which the text timestamps read as numbers are counted (the
#: reader turns it into a note).
TIMES_FROM_TEXT = "(ts or dur read from text)"

_GPU_CATS = ["kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset"]


def parse_ndjson(ndjson: bytes, parsed: Parsed, exact: bool = True) -> pl.DataFrame:
    """`parse_block` with the fields `parsed` has shown so far; what the block shows more is
    recorded in `parsed` (and so parsed in every later block of the file)."""
    raw, fields, texts = parse_block(ndjson, parsed.fields, exact)
    parsed.fields = fields
    if texts:
        parsed.dropped[TIMES_FROM_TEXT] += texts
    return raw


def parse_block(
    ndjson: bytes, fields: Fields, exact: bool = True
) -> tuple[pl.DataFrame, Fields, int]:
    """Parse NDJSON events with the optional fields `fields` says the file has shown; the
    rows, the fields shown once this block is read, and how many timestamps or durations it
    wrote as JSON text (counted from the bytes: a number and a text read alike).

    Ids are parsed as numbers until the file shows text ids: a text id parsed as a number
    comes out null, so a duration event without pid/tid, or a GPU event with args but no
    stream, means this producer writes ids as text. Memory and collective fields are parsed
    once the file shows a `[memory]` event, or an event whose name may carry collective
    fields (or has `distributedInfo`); `Concrete Inputs`, once it shows a convolution
    operator (`CONV_OP_NAME`); args objects the splitter did not lift, once an event
    the model keeps shows none of the args fields (a Kineto event always has one: its
    correlation or External id). Each time the block is parsed again with the new fields
    (and so is every later block of the file: the reader hands them on in file order).
    `exact`: the block may hold `tn` (the splitter rewrote its timestamps). A pure function
    of its arguments: blocks parse on several threads at once.
    """
    raw = read_ndjson(ndjson, fields.text_ids, fields.skipped(exact), fields.text_times)
    while (more := _shows_more(raw, fields, ndjson)) != fields:  # each pass turns one more on
        fields = more
        raw = read_ndjson(ndjson, fields.text_ids, fields.skipped(exact), fields.text_times)
    texts = len(TEXT_TIME.findall(ndjson)) if fields.text_times else 0
    return raw, fields, texts


#: Kineto events the model keeps, as the parser sees them before normalising.
_KEPT_EVENT = (pl.col("ph") == "X") & pl.col("cat").is_in(list(KIND_BY_CAT))


_MEMORY_EVENT = (pl.col("ph") == "i") & (pl.col("name") == "[memory]")


def _shows_more(raw: pl.DataFrame, fields: Fields, ndjson: bytes = b"") -> Fields:
    """`fields` with what `raw` shows and was not parsed yet turned on: text ids, memory
    events, collectives, convolution operators or args objects."""
    checks: dict[str, pl.Expr] = {}
    if not fields.text_ids:
        checks["text_ids"] = (
            (pl.col("ph") == "X") & (pl.col("pid").is_null() | pl.col("tid").is_null())
            | pl.col("cat").is_in(_GPU_CATS)
            & pl.any_horizontal(
                pl.col(f).is_not_null() for f in ("correlation", "External id", "grid", "bytes")
            )
            & pl.col("stream").is_null()
        ).any()
    if not fields.memory:
        # compared as a category, not cast per row
        checks["memory"] = _MEMORY_EVENT.any()
    names = pl.col("name").unique().cast(pl.String)
    if not fields.comm:
        checks["comm"] = names.str.contains(_COMM_NAME).any()
    if not fields.conv:
        checks["conv"] = names.str.contains(CONV_OP_NAME).any()
    if not fields.text_times:
        # a kept event without ts or dur: written as text (checked against the bytes)
        checks["text_times"] = (
            _KEPT_EVENT
            & pl.col("tn").is_null()
            & (pl.col("ts").is_null() | pl.col("dur").is_null())
        ).any()
    if not fields.args:
        # an args object left in place leaves its event without any args field
        skipped = fields.skipped(exact=True)
        read = [f for f in arg_fields(fields.text_ids) if f not in skipped]
        kept = (_KEPT_EVENT | _MEMORY_EVENT) if fields.memory else _KEPT_EVENT
        checks["args"] = (kept & pl.all_horizontal(pl.col(f).is_null() for f in read)).any()
    if not checks or raw.height == 0:
        return fields
    seen = raw.select(**checks).row(0, named=True)
    if seen.get("text_times", False) and not TEXT_TIME.search(ndjson):
        seen["text_times"] = False
    return dataclasses.replace(fields, **{k: True for k, v in seen.items() if v})


@dataclass(frozen=True, slots=True)
class Fields:
    """Which optional field groups a file has shown, and so are parsed (see `parse_block`)."""

    text_ids: bool = False  # ids are written as text
    memory: bool = False  # memory events seen: their fields are parsed
    comm: bool = False  # collectives seen (or a distributed job): their fields are parsed
    conv: bool = False  # convolution operators seen: their Concrete Inputs are parsed
    args: bool = False  # args objects not lifted seen: they are parsed
    text_times: bool = False  # ts or dur written as JSON text

    def skipped(self, exact: bool) -> frozenset[str]:
        """The optional fields not parsed (yet) in a block; `exact`: it may hold `tn`."""
        skip: tuple[str, ...] = () if exact else ("tn",)
        skip += () if self.memory else MEMORY_FIELDS
        skip += () if self.comm else COMM_FIELDS
        skip += () if self.conv else CONV_FIELDS
        skip += () if self.args else ("args",)
        return frozenset(skip)


@dataclass
class Parsed:
    """What one file yields before it becomes a Timeline."""

    path: Path
    header: dict[str, Any]
    #: The events read so far, in file order: the blocks' own frames, then (from
    #: `GROW_FROM_ROWS` events) one frame that grows (`keep`).
    frames: list[pl.DataFrame] = field(default_factory=list)
    dropped: Counter[str] = field(default_factory=Counter)
    truncated: bool = False
    notes: list[str] = field(default_factory=list)
    #: The optional fields the file has shown so far (in file order: see `parse_block`).
    fields: Fields = field(default_factory=Fields)

    @property
    def event_count(self) -> int:
        """Events read so far (after normalisation)."""
        return sum(f.height for f in self.frames)


def keep(result: Frame, parsed: Parsed) -> None:
    """Add a block's events and drop counts to what the file yielded so far.

    Past `GROW_FROM_ROWS` events the frames are made one, and each block's events are then
    appended to it in place (`DataFrame.extend`): its fixed-width columns grow as vectors do,
    by doubling, and the block's frame is freed at once. Its text and list columns keep a
    piece per block, made one with the rest at the read's end (`chrome_trace._contiguous`).
    Kept as pieces, every column of the events was copied at the end, and the pieces freed
    then stayed resident while the allocator held them: on a 741 MB trace read with 8
    workers the read peaked 200-230 MB higher. Below the threshold the pieces are kept: a
    column that grows by doubling while it is small leaves the allocator more of its old
    copies (see docs/chrome-reader.md).
    """
    frame, dropped = result
    parsed.dropped.update(dropped)
    if frame is None:
        return
    frames = parsed.frames
    if len(frames) == 1 and frames[0].height >= GROW_FROM_ROWS:
        frames[0].extend(frame)
        return
    frames.append(frame)
    if len(frames) > 1 and parsed.event_count >= GROW_FROM_ROWS:
        frames[:] = [pl.concat(frames, how="vertical", rechunk=True)]


#: Events kept as the blocks' own frames before they are made one frame that grows in place
#: (`keep`): about 130 MB of events.
GROW_FROM_ROWS = 1 << 20
