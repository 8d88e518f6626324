"""Content-addressed result cache under ``<workspace>/.stitch/cache/``.

The key is a hash of everything that decides the answer — the task (reference
text), the candidate (CUDA + binding), the GPU, the toolchain versions and the
settings that matter — so the same question is answered from disk, also after a
restart, and a changed input is a different key (nothing to invalidate).

Entries are JSON (``stitch_lsp.serde``), one file each, written atomically (a
temporary file in the same directory, then ``os.replace``). A read that finds a
corrupt entry, an entry of another format version or one that no longer fits
the data class treats it as a miss and deletes it: never a crash. The cache is
bounded: after each write the least recently used entries go until it fits
``max_mb``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
import threading
from pathlib import Path
from typing import Any, TypeVar

from stitch_lsp import __version__
from stitch_lsp.serde import from_dict, to_dict

log = logging.getLogger(__name__)

T = TypeVar("T")

# Bump when the entry layout or a cached data class changes incompatibly.
CACHE_FORMAT = 1
SUFFIX = ".json"


def cache_key(kind: str, **parts: Any) -> str:
    """A stable hash of ``kind`` and ``parts`` (any serde-able values; order-independent)."""
    canonical = json.dumps(
        {"kind": kind, "format": CACHE_FORMAT, "parts": to_dict(parts)},
        sort_keys=True,
        separators=(",", ":"),
        default=str,
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


class ResultCache:
    def __init__(self, root: Path | str, max_mb: float = 512) -> None:
        self.root = Path(root)
        self.max_bytes = int(max_mb * 1024 * 1024)
        self._lock = threading.Lock()

    @classmethod
    def for_workspace(cls, workspace: Path | str, max_mb: float = 512) -> "ResultCache":
        return cls(Path(workspace) / ".stitch" / "cache", max_mb)

    def path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}{SUFFIX}"

    def get(self, key: str, cls: type[T]) -> T | None:
        path = self.path(key)
        try:
            raw = path.read_bytes()
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            log.warning("cache entry %s unreadable: %s", path, exc)
            return None
        try:
            entry = json.loads(raw)
            if not isinstance(entry, dict) or entry.get("format") != CACHE_FORMAT or entry.get("key") != key:
                raise ValueError(f"format {entry.get('format') if isinstance(entry, dict) else '?'}")
            if entry.get("type") != cls.__name__:
                raise ValueError(f"holds a {entry.get('type')}, not a {cls.__name__}")
            value = from_dict(entry["value"], cls)
        except Exception as exc:  # corrupt, truncated, older layout: a miss, then replaced
            log.info("cache entry %s ignored (%s); it will be replaced", path.name, exc)
            self._remove(path)
            return None
        try:
            os.utime(path)  # recently used: last to be evicted
        except OSError:
            pass
        return value

    def put(self, key: str, value: Any) -> Path | None:
        """Store ``value``; returns the entry's path (None when the disk refused: logged, not raised)."""
        path = self.path(key)
        entry = {
            "format": CACHE_FORMAT,
            "stitch": __version__,
            "key": key,
            "type": type(value).__name__,
            "value": to_dict(value),
        }
        data = json.dumps(entry, separators=(",", ":")).encode()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=SUFFIX, dir=path.parent)
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                os.replace(tmp, path)
            except BaseException:
                self._remove(Path(tmp))
                raise
        except OSError as exc:
            log.warning("could not write cache entry %s: %s", path, exc)
            return None
        self.evict()
        return path

    def entries(self) -> list[tuple[Path, int, float]]:
        """(path, bytes, last used) of every entry."""
        out = []
        if not self.root.is_dir():
            return out
        for sub in self.root.iterdir():
            if not sub.is_dir():
                continue
            for p in sub.iterdir():
                if p.name.startswith(".tmp-") or not p.name.endswith(SUFFIX):
                    continue
                try:
                    st = p.stat()
                except OSError:
                    continue
                out.append((p, st.st_size, st.st_mtime))
        return out

    def size_bytes(self) -> int:
        return sum(size for _, size, _ in self.entries())

    def evict(self) -> int:
        """Remove least recently used entries until the cache fits; returns how many went."""
        with self._lock:
            entries = self.entries()
            total = sum(size for _, size, _ in entries)
            removed = 0
            for path, size, _ in sorted(entries, key=lambda e: e[2]):
                if total <= self.max_bytes:
                    break
                self._remove(path)
                total -= size
                removed += 1
            return removed

    def clear(self) -> None:
        for path, _, _ in self.entries():
            self._remove(path)

    @staticmethod
    def _remove(path: Path) -> None:
        try:
            path.unlink()
        except OSError:
            pass
