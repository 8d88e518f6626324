"""One JSON converter for every data class that crosses a boundary.

Used for the worker pipe, the result cache, ``--json`` output and plans on disk.
"""

from __future__ import annotations

import json
from typing import Any, TypeVar

import cattrs
from cattrs.preconf.json import make_converter

T = TypeVar("T")

converter: cattrs.Converter = make_converter()


def to_dict(obj: Any) -> Any:
    return converter.unstructure(obj)


def from_dict(data: Any, cls: type[T]) -> T:
    return converter.structure(data, cls)


def to_json(obj: Any, *, indent: int | None = None) -> str:
    return json.dumps(to_dict(obj), indent=indent, sort_keys=indent is not None)


def from_json(text: str | bytes, cls: type[T]) -> T:
    return from_dict(json.loads(text), cls)
