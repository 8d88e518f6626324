"""The tree-sitter CUDA language, parsers and the query files in ``grammars/``.

Queries live as ``.scm`` files so they can be read and tested on their own. In a
checkout they sit in the top-level ``grammars/`` folder; an installed package
carries them as package data under ``stitch_lsp/analysis/grammars`` (a symlink in
the checkout), so both layouts are searched.
"""

from __future__ import annotations

import functools
from pathlib import Path

import tree_sitter_cuda
from tree_sitter import Language, Parser, Query


def grammar_dirs() -> list[Path]:
    here = Path(__file__).resolve()
    return [here.parents[2] / "grammars", here.parent / "grammars"]


def grammar_path(name: str) -> Path:
    for folder in grammar_dirs():
        candidate = folder / name
        if candidate.is_file():
            return candidate
    searched = ", ".join(str(d) for d in grammar_dirs())
    raise FileNotFoundError(f"query file {name!r} not found (searched {searched})")


@functools.cache
def cuda_language() -> Language:
    return Language(tree_sitter_cuda.language())


def new_parser() -> Parser:
    """A parser of its own: tree-sitter parsers must not be shared between threads."""
    return Parser(cuda_language())


@functools.cache
def load_query(name: str) -> Query:
    return Query(cuda_language(), grammar_path(name).read_text(encoding="utf-8"))


def facts_query() -> Query:
    return load_query("cuda_facts.scm")
