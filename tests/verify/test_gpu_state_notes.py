"""What the clock snapshots around a timing run make the verdict say (no GPU: the snapshots are made up)."""

from __future__ import annotations

import os

from stitch_lsp.worker.gpu_state import Snapshot, _others, notes


def snap(sm=1980, mem=3201, slow=(), others=()):
    return Snapshot(sm_mhz=sm, mem_mhz=mem, sm_max_mhz=1980, slowdowns=list(slow), others=list(others), source="NVML")


def test_steady_clocks_and_an_empty_gpu_are_not_flagged():
    n = notes([snap(), snap()])
    assert not n.flagged and n.notes == [] and n.sm_mhz == [1980, 1980] and n.source == "NVML"


def test_a_moving_clock_a_slowdown_and_another_process_are_each_flagged():
    n = notes([snap(sm=1980), snap(sm=1410)])
    assert n.flagged and n.notes == ["SM clock moved during timing: 1410–1980 MHz"]
    assert notes([snap(mem=3201), snap(mem=2619)]).notes == ["memory clock moved during timing: 2619–3201 MHz"]
    assert not notes([snap(sm=1980), snap(sm=1950)]).flagged  # 1.5 %: boost wobble, not a move
    slow = notes([snap(slow=["hardware thermal slowdown"]), snap()])
    assert slow.flagged and "hardware thermal slowdown" in slow.notes[0]
    busy = notes([snap(others=["pid 77 (2048 MiB)"]), snap()])
    assert busy.flagged and busy.other_processes == ["pid 77 (2048 MiB)"] and "1 other process" in busy.notes[0]


def test_no_reading_is_said_not_hidden():
    n = notes([Snapshot(error="no NVML (pynvml) and no nvidia-smi: clocks not recorded")])
    assert not n.flagged and n.source == "" and "clocks not recorded" in n.notes[0]


def test_this_worker_is_not_another_process():
    me = os.getpid()
    assert _others([(me, 900), (123, 2048)]) == ["pid 123 (2048 MiB)"]
    # In a container NVML may show host process ids: this worker is then taken to be one of them.
    assert _others([(991, 900)]) == []
    assert _others([(991, 900), (992, 100)]) == ["pid 992 (100 MiB)"]
