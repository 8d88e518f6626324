"""Every rule's docs page shows a bad example that fires it and a good one that is quiet."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from stitch_lsp.analysis.cuda_analysis import CudaAnalyzer
from stitch_lsp.analysis.rules import ALL_RULES, doc_url

DOCS = Path(__file__).resolve().parents[2] / "docs" / "rules"
BLOCK = re.compile(r"^## (Bad|Good)\n\n```cuda\n(.*?)\n```", re.S | re.M)


def examples(code: str) -> dict[str, str]:
    return {kind: body for kind, body in BLOCK.findall((DOCS / f"{code}.md").read_text(encoding="utf-8"))}


@pytest.mark.parametrize("code", [r.meta.code for r in ALL_RULES])
def test_docs_examples_match_the_rule(code):
    ex = examples(code)
    assert set(ex) == {"Bad", "Good"}
    bad = CudaAnalyzer("bad.cu").analyze(ex["Bad"])
    good = CudaAnalyzer("good.cu").analyze(ex["Good"])
    assert bad.parse_ok and good.parse_ok
    assert code in {f.code for f in bad.findings}
    assert [(f.code, f.message) for f in good.findings] == []


def test_doc_url_points_at_the_page_in_this_checkout():
    url = doc_url("STC003")
    assert url.startswith("file://") and url.endswith("/docs/rules/STC003.md")
    assert doc_url("STC999") == "https://github.com/stitch-lsp/stitch/blob/main/docs/rules/STC999.md"


def test_silencing_is_documented_on_every_page():
    for rule in ALL_RULES:
        assert f"// stitch: ignore {rule.meta.code}" in (DOCS / f"{rule.meta.code}.md").read_text()


def test_rules_index_lists_every_rule_with_its_severity():
    index = (DOCS / "README.md").read_text()
    for rule in ALL_RULES:
        m = rule.meta
        assert f"| [{m.code}]({m.code}.md) | `{m.slug}` | {m.severity.name.lower()} |" in index
