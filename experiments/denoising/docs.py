"""The generated parts of the README's denoising section and of docs/denoising.md: every number
they state comes from the committed CSV and plan through :mod:`.report`, between
``<!-- NAME -->`` and ``<!-- end NAME -->`` markers (``python -m experiments.denoising
--update-docs`` rewrites them; a test checks they are what it would write)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from experiments.denoising import report
from experiments.denoising.design import REPO, RESULTS

__all__ = ["sections", "update"]


def sections(rows: list[dict], plan: dict, sensitivity_csv: Path = RESULTS / "denoising_sensitivity.csv"
             ) -> dict[str, dict[str, str]]:
    """File (relative to the repository) -> marker -> the text between its markers (the
    reproducibility table once its record exists, before it a line that says it does not)."""
    from experiments.denoising import sensitivity

    out = {
        "README.md": {
            "denoising comparisons": report.key_table(rows, plan),
            "denoising verdict": report.verdict(rows, plan),
        },
        "docs/denoising.md": {
            "denoising comparisons": report.comparison_table(rows, plan) + "\n\n" + report.confusion_table(rows, plan),
            "denoising arms": report.arms_table(report.settled(rows, plan)) + "\n\n" + report.outcomes_table(rows, plan),
            "denoising data": report.data_text(plan),
            "denoising reading": report.reading(rows, plan),
        },
    }
    if sensitivity_csv.is_file():
        records = sensitivity_csv.with_suffix("")
        cells = {json.loads(p.read_text())["cell"] for p in records.glob("*.json")}
        out["docs/denoising.md"]["denoising sensitivity"] = sensitivity.table(
            sensitivity.read(sensitivity_csv), cells.pop() if len(cells) == 1 else None)
    else:  # say so rather than leave an empty table under a sentence that announces one
        shown = sensitivity_csv.relative_to(REPO).as_posix() if sensitivity_csv.is_relative_to(REPO) else sensitivity_csv
        out["docs/denoising.md"]["denoising sensitivity"] = (
            f"Not measured yet on this grid's machine: no `{shown}` is "
            "committed (`.venv/bin/python -m experiments.denoising --sensitivity scratch/dna/seed0` writes it and this table).")
    return out


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
