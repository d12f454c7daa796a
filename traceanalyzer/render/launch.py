"""The launch-shape lines every text renderer shows (terminal, Markdown, HTML): per device
the SMs its kernels kept busy, and the kernels' shapes, underfilled ones first."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

#: Kernels shown in the launch-shape table.
SHOWN = 8
#: The table's columns: (heading, key, format).
COLUMNS: tuple[tuple[str, str], ...] = (
    ("blocks", "blocks"),
    ("threads", "threads_per_block"),
    ("regs", "registers_per_thread"),
    ("blocks/SM", "blocks_per_sm"),
    ("occupancy", "occupancy_share"),
    ("waves", "waves"),
    ("SMs filled", "sm_fill_share"),
)


def device_lines(devices: Sequence[Mapping[str, Any]]) -> list[str]:
    """ "rank 0 GPU 0: kernels kept 87% of its 132 SMs busy over their time; 3 launches
    leave most SMs idle (1.9 ms)", per device with launch shapes."""
    out = []
    for d in devices:
        la = d.get("launch")
        if not la or la["sm_fill_share"] is None:
            continue
        words = (
            f"rank {d['rank']} GPU {d['device']}: its kernels kept {la['sm_fill_share']:.0%} "
            f"of its {la['sm_count']} SMs busy over their time"
        )
        if n := la["underfilled_count"]:
            words += (
                f"; {n} launch{'es' if n != 1 else ''} leave{'s' if n == 1 else ''} most SMs "
                f"idle ({la['underfilled_ns'] / 1e6:.1f} ms in the window)"
            )
        if la["limits_source"] != "trace":
            words += f" (SM limits: {la['limits_source']})"
        out.append(words)
    return out


def shown(rows: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The kernels of the table: underfilled ones first (most time removed), then the rest by
    time, at most SHOWN."""
    under = [r for r in rows if r["underfilled_ns"]]
    rest = sorted((r for r in rows if not r["underfilled_ns"]), key=lambda r: -r["total_ns"])
    return [*under, *rest][:SHOWN]


def cell(row: Mapping[str, Any], key: str) -> str:
    """One cell of the table, as text ("-" where the trace does not record it)."""
    value = row.get(key)
    if value is None:
        return "-"
    if key.endswith("_share"):
        return f"{value:.0%}"
    if key == "waves":
        return f"{value:.2f}"
    return str(value)
