"""The static rubric rules, one module each, in one registry (codes are stable)."""

from __future__ import annotations

from stitch_lsp.analysis.rules.base import FileRule, Rule, RuleMeta, doc_url

from stitch_lsp.analysis.rules import (  # noqa: E402  (registry order = code order)
    stc001_unguarded_global_write,
    stc002_divergent_barrier,
    stc008_mutable_readonly_param,
    stc009_unchecked_launch,
)

FUNCTION_RULES: tuple[Rule, ...] = (
    stc001_unguarded_global_write.RULE,
    stc002_divergent_barrier.RULE,
    stc008_mutable_readonly_param.RULE,
    stc009_unchecked_launch.RULE,
)
FILE_RULES: tuple[FileRule, ...] = ()

ALL_RULES = tuple(sorted((*FUNCTION_RULES, *FILE_RULES), key=lambda r: r.meta.code))


def rule_by_code(code: str) -> Rule | FileRule | None:
    return next((r for r in ALL_RULES if r.meta.code == code), None)


__all__ = ["ALL_RULES", "FILE_RULES", "FUNCTION_RULES", "RuleMeta", "doc_url", "rule_by_code"]
