"""Chrome reader, the tail: what follows the last whole event (the last events, the array's
end and the keys after it, or a truncated tail), decoded with the standard library's JSON
scanner; and the header keys before `traceEvents`."""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

import orjson
import polars as pl

from traceanalyzer.errors import TraceFormatError
from traceanalyzer.readers.chrome_fields import Parsed, keep, parse_ndjson, raw_schema
from traceanalyzer.readers.chrome_normalise import normalise
from traceanalyzer.readers.json_scan import exact_text, needs_exact_timestamps

#: JSON whitespace.
WHITESPACE = b" \t\r\n"


def parse_header(header: bytes) -> dict[str, Any]:
    """Parse the keys before `"traceEvents"` (`{..., "k": v,` -> a dict)."""
    text = header.rstrip(WHITESPACE).rstrip(b",")
    if not text.lstrip(WHITESPACE).startswith(b"{"):
        return {}
    try:
        doc = orjson.loads(text + b"}")
    except orjson.JSONDecodeError:
        return {}
    return doc if isinstance(doc, dict) else {}


_MORE_EVENTS = re.compile(r"\}\s*,\s*\{")


def _scan_events(text: str) -> tuple[list[Any], int, int]:
    """Decode consecutive `{...}` values separated by commas; stop at `]` or a bad value.

    Returns the events, the index just past the closing `]` (-1 when the array did not end)
    and the index of the value that failed to decode (-1 when none did).
    """
    decoder = json.JSONDecoder()
    events: list[Any] = []
    i, n = 0, len(text)
    while True:
        while i < n and text[i] in " \t\r\n,":
            i += 1
        if i >= n:
            return events, -1, -1
        if text[i] == "]":
            return events, i + 1, -1
        try:
            obj, i = decoder.raw_decode(text, i)
        except (json.JSONDecodeError, RecursionError):  # cut off, or nested very deep
            return events, -1, i
        events.append(obj)


def parse_tail(body: bytes, parsed: Parsed) -> None:
    """Parse what follows the last separator: the last events, `]`, and the trailing keys."""
    text = exact_text(body)
    events, end, bad = _scan_events(text)
    if bad >= 0 and _MORE_EVENTS.search(text, bad):
        # whole events follow the one that failed: the file is damaged, not cut off
        raise TraceFormatError(
            f"not valid JSON: the event after {parsed.event_count + len(events)} good ones "
            "is malformed and more events follow it",
            path=parsed.path,
            hint="the file is damaged; copy it again from its source or re-export the trace",
        )
    if events:
        exact = needs_exact_timestamps(body)  # `tn` is then the splitter's key
        keep(normalise(_raw_from_dicts(events, parsed, exact)), parsed)
    if end < 0:
        parsed.truncated = True
        parsed.notes.append(
            f"{parsed.path.name}: the trace is cut off mid-event; "
            "the events before the cut were read"
        )
        return
    trailer = text[end:].strip(" \t\r\n").lstrip(",").strip(" \t\r\n")
    if not trailer or trailer == "}":
        return
    try:
        doc = orjson.loads("{" + trailer)
    except orjson.JSONDecodeError:
        parsed.truncated = True
        parsed.notes.append(f"{parsed.path.name}: the keys after traceEvents are cut off")
        return
    if isinstance(doc, dict):
        for key, value in doc.items():
            parsed.header.setdefault(key, value)


def _raw_from_dicts(events: list[Any], parsed: Parsed, exact: bool) -> pl.DataFrame:
    """Turn decoded event dicts into the raw frame (via NDJSON, so typing is identical)."""
    dicts = [e for e in events if isinstance(e, dict)]
    if not dicts:
        return pl.DataFrame(schema=raw_schema(text_ids=False)).drop("args")
    # decoded events keep their args objects: parse them
    parsed.fields = dataclasses.replace(parsed.fields, args=True)
    return parse_ndjson(b"\n".join(map(orjson.dumps, dicts)), parsed, exact)
