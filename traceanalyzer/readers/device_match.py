"""Matching a trace's GPU descriptions to the device ids its GPU work carries.

Kineto writes `deviceProperties` (one entry per GPU the process could see, with an `id`)
and tags each kernel with a `device`. The two disagree in real traces: an MI300X virtual
function lists one GPU as id 0 while its kernels run on device 2; a server pinned to one
GPU (sglang on device 9) lists another numbering. A kernel whose device has no entry would
get no GPU name, hence no peaks and no vendor.

`match_devices` keeps the entries, and gives each device id without an entry the
description it can only be:

- one entry and one device id with GPU work: that entry, renumbered to the id the work
  uses (the process saw one GPU);
- several entries that all describe the same GPU model (name, compute capability, SMs,
  memory): that model, for every unmatched id (which of the identical GPUs ran the work
  does not change what it is);

and otherwise leaves the device without a name, saying why. Each decision is a note for
`data_quality.notes`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import replace

from traceanalyzer.model import DeviceInfo


def _model(d: DeviceInfo) -> tuple[object, ...]:
    return (d.name, d.compute_capability, d.sm_count, d.memory_bytes)


def _ids(ids: Iterable[int]) -> str:
    return ", ".join(str(i) for i in sorted(ids))


def match_devices(
    listed: Sequence[DeviceInfo], used: Iterable[int]
) -> tuple[tuple[DeviceInfo, ...], list[str]]:
    """The device descriptions for the ids GPU work uses, and a note per decision.

    `listed`: the trace's descriptions (`deviceProperties`), in order; `used`: the device
    ids the trace's GPU work carries. Listed entries are kept (the report lists the node's
    GPUs), but a single entry matched to a single other id is renumbered; an added entry,
    for a used id without one, copies the description it is matched to under that id.
    """
    used_ids = sorted(set(used))
    by_id = {d.device: d for d in listed}
    missing = [i for i in used_ids if i not in by_id]
    if not missing or not listed:
        return tuple(listed), []
    first = listed[0]
    models = {_model(d) for d in listed}
    name = first.name or "an unnamed GPU"
    if len(listed) == 1 and len(used_ids) == 1:
        note = (
            f"deviceProperties lists one GPU ({name}, id {first.device}) but the GPU work "
            f"runs on device {missing[0]} (a virtual function or a remapped device): "
            f"device {missing[0]} is taken to be that GPU"
        )
    elif len(models) == 1:
        note = (
            f"deviceProperties lists {len(listed)} identical GPUs ({name}, ids "
            f"{_ids(by_id)}) but GPU work also runs on device(s) {_ids(missing)}: "
            "taken to be the same GPU model"
        )
    else:
        note = (
            f"GPU work runs on device(s) {_ids(missing)}, which deviceProperties does not "
            f"list (it lists ids {_ids(by_id)}, of {len(models)} different GPU models): "
            "their GPU name, peaks and vendor are unknown"
        )
        return tuple(listed), [note]
    if len(listed) == 1 and len(used_ids) == 1:  # the same GPU, under the id the work uses
        return (replace(first, device=missing[0]),), [note]
    added = tuple(replace(first, device=i) for i in missing)
    return tuple(sorted((*listed, *added), key=lambda d: d.device)), [note]


#: Architectures by the SM version their kernels are built for (`sm90_xmma_...`,
#: `nvjet_sm90_...`, `cutlass::arch::Sm80`), and the older cuBLAS/cuDNN name prefixes.
ARCHITECTURES: dict[str, str] = {
    "7.0": "Volta",
    "7.5": "Turing",
    "8.0": "Ampere",
    "8.6": "Ampere",
    "8.9": "Ada",
    "9.0": "Hopper",
    "10.0": "Blackwell",
    "12.0": "Blackwell",
}
_SM_IN_NAME = re.compile(r"(?:^|[_:])[sS]m_?(\d{2,3})(?!\d)")
_PREFIX_SM = {"volta_": "7.0", "turing_": "7.5", "ampere_": "8.0", "hopper_": "9.0"}


def architecture_from_names(names: Iterable[str]) -> str | None:
    """The compute capability the kernels' names give away ("9.0" for `sm90_xmma_*` or
    `nvjet_sm90_*`), the highest seen (a library runs kernels built for an older SM on a
    newer GPU, never the reverse); None where no name says."""
    best: tuple[int, int] | None = None
    for name in names:
        found = [(int(m[:-1]), int(m[-1])) for m in _SM_IN_NAME.findall(name)]
        found += [
            tuple(int(x) for x in cc.split("."))  # type: ignore[misc]
            for prefix, cc in _PREFIX_SM.items()
            if name.startswith(prefix)
        ]
        for cc in found:
            if f"{cc[0]}.{cc[1]}" in ARCHITECTURES and (best is None or cc > best):
                best = cc
    return f"{best[0]}.{best[1]}" if best else None


def described_by_names(
    devices: tuple[DeviceInfo, ...], used: Iterable[int], rank: int, kernel_names: Iterable[str]
) -> tuple[tuple[DeviceInfo, ...], list[str]]:
    """`devices` with an entry for each used device the trace does not describe, its
    architecture read off the kernels' names ("Hopper GPU (sm_90)"), and a note that says
    so; unchanged where no name tells."""
    described = {d.device for d in devices}
    missing = [i for i in sorted(set(used)) if i not in described]
    if not missing:
        return devices, []
    cc = architecture_from_names(kernel_names)
    if cc is None:
        return devices, []
    name = f"{ARCHITECTURES[cc]} GPU (sm_{cc.replace('.', '')})"
    added = tuple(
        DeviceInfo(rank=rank, device=i, name=name, compute_capability=cc) for i in missing
    )
    note = (
        f"the trace describes no GPU for device(s) {_ids(missing)}: its kernel names say they "
        "are built for "
        f"sm_{cc.replace('.', '')}, {_article(ARCHITECTURES[cc])} {ARCHITECTURES[cc]} GPU "
        "(model, SM count and peaks unknown)"
    )
    return (*devices, *added), [note]


def _article(word: str) -> str:
    return "an" if word[:1] in "AEIOU" else "a"
