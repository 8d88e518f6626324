"""The result cache: hits survive a restart, bad entries are misses (then replaced), size stays bounded."""

from __future__ import annotations

import json
import os
import time

from stitch_lsp.jobs.cache import CACHE_FORMAT, ResultCache, cache_key
from stitch_lsp.verdict import Timing, TimingStats, Verdict, VerdictStatus


def _verdict(speedup: float = 2.5) -> Verdict:
    return Verdict(
        status=VerdictStatus.CORRECT,
        summary=f"correct, {speedup}x over eager",
        timing=Timing(status="measured", candidate=TimingStats(median_ms=0.1), speedup_vs_eager=speedup),
    )


def test_key_depends_on_every_part_and_not_on_their_order():
    a = cache_key("verify", task="t", candidate="c", gpu="H100", toolchain={"nvcc": "13.0", "torch": "2.11"})
    b = cache_key("verify", gpu="H100", candidate="c", task="t", toolchain={"torch": "2.11", "nvcc": "13.0"})
    assert a == b
    assert a != cache_key("verify", task="t", candidate="c", gpu="A100", toolchain={"nvcc": "13.0", "torch": "2.11"})
    assert a != cache_key("verify", task="t", candidate="c", gpu="H100", toolchain={"nvcc": "13.1", "torch": "2.11"})
    assert a != cache_key("profile", task="t", candidate="c", gpu="H100", toolchain={"nvcc": "13.0", "torch": "2.11"})


def test_round_trip_survives_a_new_cache_object(tmp_path):
    key = cache_key("verify", task="t")
    ResultCache.for_workspace(tmp_path).put(key, _verdict())
    again = ResultCache.for_workspace(tmp_path).get(key, Verdict)  # a "restarted server"
    assert again is not None
    assert again.status is VerdictStatus.CORRECT and again.timing.speedup_vs_eager == 2.5
    assert (tmp_path / ".stitch" / "cache").is_dir()
    assert not [p for p in (tmp_path / ".stitch" / "cache").rglob(".tmp-*")]


def test_corrupt_entry_is_a_miss_and_is_replaced(tmp_path):
    cache = ResultCache(tmp_path)
    key = cache_key("verify", task="t")
    path = cache.put(key, _verdict())
    path.write_text('{"format": 1, "key": "' + key + '", "value": {"stat')  # truncated write
    assert cache.get(key, Verdict) is None
    assert not path.exists()
    cache.put(key, _verdict(3.0))
    assert cache.get(key, Verdict).timing.speedup_vs_eager == 3.0


def test_entry_from_an_older_format_or_of_another_type_is_ignored(tmp_path):
    cache = ResultCache(tmp_path)
    key = cache_key("verify", task="t")
    path = cache.put(key, _verdict())
    entry = json.loads(path.read_text())
    entry["format"] = CACHE_FORMAT - 1
    path.write_text(json.dumps(entry))
    assert cache.get(key, Verdict) is None
    cache.put(key, _verdict())
    assert cache.get(key, Timing) is None  # a Verdict entry never comes back as something else
    # Valid JSON that no longer fits the class (a renamed field's value of the wrong type).
    cache.put(key, _verdict())
    entry = json.loads(cache.path(key).read_text())
    entry["value"]["status"] = "no-such-status"
    cache.path(key).write_text(json.dumps(entry))
    assert cache.get(key, Verdict) is None


def test_binary_garbage_and_a_directory_in_the_way_are_misses(tmp_path):
    cache = ResultCache(tmp_path)
    key = cache_key("verify", task="x")
    cache.path(key).parent.mkdir(parents=True)
    cache.path(key).write_bytes(b"\x00\xff\xfe garbage")
    assert cache.get(key, Verdict) is None
    blocked = ResultCache(tmp_path / "file")
    (tmp_path / "file").write_text("not a directory")
    assert blocked.put(key, _verdict()) is None  # logged, not raised
    assert blocked.get(key, Verdict) is None


def test_bounded_size_evicts_least_recently_used(tmp_path):
    probe = ResultCache(tmp_path / "probe")
    probe.put("probe", _verdict())
    room = 5 * probe.path("probe").stat().st_size  # about five verdicts, whatever a verdict weighs
    cache = ResultCache(tmp_path, max_mb=room / (1024 * 1024))
    keys = [cache_key("verify", task=str(i)) for i in range(12)]
    for i, key in enumerate(keys):
        cache.put(key, _verdict(float(i)))
        past = time.time() - 100 + i
        os.utime(cache.path(key), (past, past))
    assert cache.size_bytes() <= cache.max_bytes
    assert cache.get(keys[-1], Verdict) is not None  # newest kept
    assert cache.get(keys[0], Verdict) is None  # oldest evicted
    # Reading an entry makes it recently used: it outlives newer unread ones.
    survivors = [k for k in keys if cache.path(k).exists()]
    oldest_survivor = survivors[0]
    assert cache.get(oldest_survivor, Verdict) is not None
    for i in range(12, 15):
        cache.put(cache_key("verify", task=str(i)), _verdict())
    assert cache.path(oldest_survivor).exists()
