"""The generated parts of the README's denoising section and of docs/denoising.md: every number
they state comes from the committed CSV and plan through :mod:`.report`, between
``<!-- NAME -->`` and ``<!-- end NAME -->`` markers (``python -m experiments.denoising
--update-docs`` rewrites them; a test checks they are what it would write)."""

from __future__ import annotations

import re
from pathlib import Path

from experiments.denoising import report
from experiments.denoising.design import REPO

__all__ = ["sections", "update"]


def sections(rows: list[dict], plan: dict) -> dict[str, dict[str, str]]:
    """File (relative to the repository) -> marker -> the text between its markers."""
    return {
        "README.md": {
            "denoising comparisons": report.comparison_table(rows, plan) + "\n\n" + report.confusion_table(rows, plan),
            "denoising verdict": report.verdict(rows, plan),
        },
        "docs/denoising.md": {
            "denoising arms": report.arms_table(rows) + "\n\n" + report.outcomes_table(rows, plan),
            "denoising data": report.data_text(plan),
        },
    }


def update(rows: list[dict], plan: dict, repo: Path = REPO) -> list[Path]:
    """Rewrite every generated block in place; the files whose text changed. A marker missing
    from its file is an error naming both (the hand-written text around it is not guessed)."""
    from dna_video.common.atomic import write_text

    changed = []
    for name, blocks in sections(rows, plan).items():
        path = repo / name
        text = old = path.read_text()
        for marker, block in blocks.items():
            pattern = re.compile(rf"<!-- {re.escape(marker)} -->\n.*?<!-- end {re.escape(marker)} -->", re.S)
            if not pattern.search(text):
                raise ValueError(f"{path}: no '<!-- {marker} -->' ... '<!-- end {marker} -->' block to rewrite")
            text = pattern.sub(lambda _: f"<!-- {marker} -->\n{block}\n<!-- end {marker} -->", text)
        if text != old:
            write_text(path, text)
            changed.append(path)
    return changed
