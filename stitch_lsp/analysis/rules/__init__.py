"""The static rubric rules, one module each, in one registry (codes are stable)."""

from __future__ import annotations

from stitch_lsp.analysis.rules import (
    stc001_unguarded_global_write,
    stc002_divergent_barrier,
    stc003_shared_race,
    stc004_block_size,
    stc005_uncoalesced,
    stc006_atomic_in_loop,
    stc007_int_index_overflow,
    stc008_mutable_readonly_param,
    stc009_unchecked_launch,
    stc010_shared_tree_reduction,
    stc011_legacy_warp_intrinsic,
    stc012_printf_in_kernel,
    stc013_shared_size_not_constant,
    stc014_missing_launch_bounds,
    stc015_double_literal,
    stc016_truncating_grid,
    stc017_shared_overwrite,
    stc018_shared_bank_conflict,
    stc019_off_by_one_bound,
    stc020_unguarded_global_read,
)
from stitch_lsp.analysis.rules.base import FileRule, Rule, RuleMeta, doc_url

FUNCTION_RULES: tuple[Rule, ...] = (
    stc001_unguarded_global_write.RULE,
    stc002_divergent_barrier.RULE,
    stc003_shared_race.RULE,
    stc004_block_size.RULE,
    stc005_uncoalesced.RULE,
    stc006_atomic_in_loop.RULE,
    stc007_int_index_overflow.RULE,
    stc008_mutable_readonly_param.RULE,
    stc010_shared_tree_reduction.RULE,
    stc011_legacy_warp_intrinsic.RULE,
    stc012_printf_in_kernel.RULE,
    stc013_shared_size_not_constant.RULE,
    stc015_double_literal.RULE,
    stc017_shared_overwrite.RULE,
    stc018_shared_bank_conflict.RULE,
    stc019_off_by_one_bound.RULE,
    stc020_unguarded_global_read.RULE,
)
FILE_RULES: tuple[FileRule, ...] = (
    stc009_unchecked_launch.RULE,
    stc014_missing_launch_bounds.RULE,
    stc016_truncating_grid.RULE,
)

ALL_RULES = tuple(sorted((*FUNCTION_RULES, *FILE_RULES), key=lambda r: r.meta.code))


def rule_by_code(code: str) -> Rule | FileRule | None:
    return next((r for r in ALL_RULES if r.meta.code == code), None)


__all__ = ["ALL_RULES", "FILE_RULES", "FUNCTION_RULES", "RuleMeta", "doc_url", "rule_by_code"]
