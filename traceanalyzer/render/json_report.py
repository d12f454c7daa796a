"""JSON renderer: the contract's object, compact keys in a stable order, no NaN."""

from __future__ import annotations

from typing import TextIO

import orjson

from traceanalyzer.report import Report


class JsonRenderer:
    """`--format json`."""

    name = "json"
    suffix = ".json"

    def render(self, report: Report, out: TextIO) -> None:
        """Write the report as indented JSON plus a newline."""
        text = orjson.dumps(report.to_json_dict(), option=orjson.OPT_INDENT_2)
        out.write(text.decode("utf-8"))
        out.write("\n")
