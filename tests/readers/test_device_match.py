"""Matching deviceProperties to the device ids GPU work carries (MI300X VFs, pinned GPUs)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.builders import kernel, write_trace
from tests.conftest import corpus
from traceanalyzer.model import DeviceInfo
from traceanalyzer.readers import read
from traceanalyzer.readers.device_match import match_devices

_VF = DeviceInfo(rank=0, device=0, name="AMD Instinct MI300X VF", compute_capability="9.4")


def _h100(i: int) -> DeviceInfo:
    return DeviceInfo(rank=0, device=i, name="NVIDIA H100 80GB HBM3", compute_capability="9.0")


def test_listed_ids_are_kept_as_they_are() -> None:
    listed = (_h100(0), _h100(1))
    assert match_devices(listed, [1]) == (listed, [])
    assert match_devices((), [3]) == ((), [])


def test_one_entry_and_one_other_id_is_that_gpu_renumbered() -> None:
    devices, notes = match_devices((_VF,), [2])
    assert devices == (DeviceInfo(0, 2, "AMD Instinct MI300X VF", "9.4"),)
    assert notes == [
        "deviceProperties lists one GPU (AMD Instinct MI300X VF, id 0) but the GPU work runs "
        "on device 2 (a virtual function or a remapped device): device 2 is taken to be that GPU"
    ]


def test_identical_gpus_name_a_device_they_do_not_list() -> None:
    # a server pinned to device 9 of a node whose process saw eight identical GPUs
    devices, notes = match_devices(tuple(_h100(i) for i in range(8)), [9])
    assert [d.device for d in devices] == [*range(8), 9]
    assert devices[-1].name == "NVIDIA H100 80GB HBM3"
    assert "8 identical GPUs" in notes[0] and "device(s) 9" in notes[0]


def test_different_gpus_are_not_guessed() -> None:
    other = DeviceInfo(rank=0, device=1, name="NVIDIA A100-SXM4-80GB", compute_capability="8.0")
    listed = (_h100(0), other)
    devices, notes = match_devices(listed, [0, 5])
    assert devices == listed
    assert "device(s) 5" in notes[0] and "unknown" in notes[0]


def test_one_entry_but_two_ids_is_not_guessed_unless_identical() -> None:
    # one entry describes one model: two devices running work are both that model
    devices, notes = match_devices((_VF,), [2, 3])
    assert [(d.device, d.name) for d in devices] == [
        (0, _VF.name),
        (2, _VF.name),
        (3, _VF.name),
    ]
    assert "identical" in notes[0]


def test_reader_names_the_device_and_says_so(tmp_path: Path) -> None:
    header = {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": "AMD Instinct MI300X VF", "computeMajor": 9}],
    }
    path = write_trace(tmp_path / "vf.json", [kernel(10, 5, "k", device=2)], header=header)
    meta = read(path).meta
    assert [(d.device, d.name) for d in meta.devices] == [(2, "AMD Instinct MI300X VF")]
    assert "device 2 is taken to be that GPU" in meta.quality.notes[0]


def test_public_mi300x_vf_trace() -> None:
    root = corpus()
    if root is None:
        pytest.skip("TRACEANALYZER_CORPUS is not set")
    path = root / "public/tracelens_rocm/mi300__gaunernst_bert-small-uncased__1016001.json.gz"
    if not path.exists():
        pytest.skip(f"{path} is not in the corpus")
    meta = read(path).meta
    assert [(d.device, d.name) for d in meta.devices] == [(2, "AMD Instinct MI300X VF")]
    assert any("device 2" in n for n in meta.quality.notes)
