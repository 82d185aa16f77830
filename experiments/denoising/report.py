"""The results of the denoising experiment: the CSV (one row per run), a record per run beside
it (measures per block and head, resolved config, provenance), and the report: every
comparison's paired difference with its 95% interval, p, minimum detectable effect and pair
correlation, the primary one as the plan states it."""

from __future__ import annotations

import csv
import json
import statistics
from pathlib import Path

import yaml

from experiments.denoising.design import Cell, comparisons
from experiments.denoising.stats import pairs_needed, paired

__all__ = ["COLUMNS", "csv_row", "read_csv", "write_results", "cell_name", "label_of", "table", "pilot_report",
           "calibration_report", "differences_figure", "plots"]

SETS = ("in_distribution", "shifted", "source")
COLUMNS = [
    "group", "variant", "dna_init", "seed", "task", "start", "epochs",
    *[f"{s}_{m}" for s in SETS for m in ("top1", "conflict_top1", "cue_follow")],
    "shifted_top1_negative_off",
    "mass_ratio_positive_actor", "mass_ratio_positive_distractors",
    "mass_ratio_negative_actor", "mass_ratio_negative_distractors",
    "map_correlation", "cos_q_pos_neg", "negative_output_ratio",
    "calibration_top1", "calibration_cue_follow", "commit", "threads", "fit_seconds",
]
METRIC_NAMES = {
    "shifted_top1": "top-1 on the shifted set (every cue points to a wrong label)",
    "in_distribution_top1": "top-1 on the in-distribution set",
}


def _text(value) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6f}"
    return str(value)


def csv_row(row: dict) -> dict:
    """A measured row as the CSV writes it (fractions with 6 decimals, None empty)."""
    return {k: _text(row.get(k)) for k in COLUMNS}


def label_of(row: dict) -> str:
    return row["variant"] + ("" if row["dna_init"] in ("-", "") else f"_{row['dna_init']}")


def cell_name(row: dict) -> str:
    return f"{row['group']}/{label_of(row)}/seed{row['seed']}"


def read_csv(path: Path) -> list[dict]:
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no results yet; run python -m experiments.denoising first")
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def write_results(cells: list[Cell], layout, csv_path: Path, records: Path) -> None:
    """The CSV of every finished cell, and beside it ``<csv stem>/<cell>.json``: the cell's
    measures, its resolved config and its provenance (no checkpoint). Each file written whole."""
    from dna_video.common.atomic import atomic_path, write_json

    rows = []
    for cell in cells:
        if not cell.done(layout.runs):
            continue
        folder = cell.folder(layout.runs)
        result = json.loads((folder / "cell.json").read_text())
        rows.append(csv_row(result["row"]))
        config = yaml.safe_load((folder / "config.yaml").read_text()) if (folder / "config.yaml").is_file() else None
        write_json(records / f"{cell.name}.json", {"row": result["row"], "details": result["details"],
                                                   "config": config, "provenance": result["provenance"]})
    csv_path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(csv_path) as partial, open(partial, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)


def _values(rows: list[dict], group: str, label: str, metric: str) -> dict[int, float]:
    return {int(r["seed"]): float(r[metric]) for r in rows
            if r["group"] == group and label_of(r) == label and r.get(metric) not in (None, "")}


def _points(x: float, signed: bool = True) -> str:
    return f"{100 * x:+.1f}" if signed else f"{100 * x:.1f}"


def comparison_rows(rows: list[dict], plan: dict) -> list[dict]:
    """Per comparison of the design: its paired statistics on its metric."""
    alpha, power = plan["primary"]["alpha"], plan["primary"]["power"]
    out = []
    for comparison in comparisons(plan):
        a = _values(rows, *comparison.a, comparison.metric)
        b = _values(rows, *comparison.b, comparison.metric)
        seeds = sorted(set(a) & set(b))
        result = paired([a[s] for s in seeds], [b[s] for s in seeds], alpha, power) if len(seeds) >= 2 else None
        out.append({"comparison": comparison, "seeds": seeds, "result": result,
                    "a_mean": statistics.fmean(a[s] for s in seeds) if seeds else None,
                    "b_mean": statistics.fmean(b[s] for s in seeds) if seeds else None})
    return out


def table(rows: list[dict], plan: dict) -> str:
    """The report: one line per comparison (points), then the per-arm means of every measure."""
    return comparison_table(rows, plan) + "\n\n" + arms_table(rows)


def comparison_table(rows: list[dict], plan: dict) -> str:
    """One line per comparison of the design (the README's table)."""
    lines = [
        "Paired differences a - b (percentage points) over the pair seeds both arms have; 95% t-interval, "
        "two-sided paired t-test p, minimum detectable effect (80% power, alpha 0.05) and the correlation of "
        "the two arms across pairs.",
        "",
        "| comparison | metric | pairs | a | b | a - b [95% CI] | p | MDE | pair corr. |",
        "|---|---|---:|---:|---:|---|---:|---:|---:|",
    ]
    for item in comparison_rows(rows, plan):
        comparison, result = item["comparison"], item["result"]
        name = ("**primary**: " if comparison.primary else "") + comparison.name
        metric = "shifted top-1" if comparison.metric == "shifted_top1" else "in-dist. top-1"
        if result is None:
            lines.append(f"| {name} | {metric} | {len(item['seeds'])} | - | - | - | - | - | - |")
            continue
        verdict = ""
        if comparison.threshold is not None:
            verdict = " (clears the bar)" if result.mean >= comparison.threshold else \
                f" (**below the {100 * comparison.threshold:.0f}-point bar: arm failed**)"
        corr = "-" if result.correlation is None else f"{result.correlation:.2f}"
        lines.append(
            f"| {name} | {metric} | {result.n} | {_points(item['a_mean'], False)} | {_points(item['b_mean'], False)} "
            f"| {_points(result.mean)} [{_points(result.low)}, {_points(result.high)}]{verdict} | {result.p:.3f} "
            f"| {_points(result.mde, False)} | {corr} |")
    return "\n".join(lines)


def arms_table(rows: list[dict]) -> str:
    """Per arm, the means over its pair seeds of every measure, and the pretraining runs."""
    lines = ["Per arm, mean over pair seeds (top-1 and rates in %; mass ratio: share of the cls token's spatial "
             "attention on a region over the region's share of the patches, 1 = uniform; means over blocks and heads).",
             "", "| group | arm | runs | in-dist. top-1 | shifted top-1 | follows the cue (shifted) | negative off "
             "(shifted) | actor ratio +/- | distractor ratio +/- | corr(+, -) | cos(q+, -q-) | ‖neg‖/‖pos‖ |",
             "|---|---|---:|---:|---:|---:|---:|---|---|---:|---:|---:|"]
    groups: dict[tuple[str, str], list[dict]] = {}
    for row in rows:
        if row["task"] == "target":
            groups.setdefault((row["group"], label_of(row)), []).append(row)

    def mean(group_rows: list[dict], key: str, scale: float = 100.0, digits: int = 1) -> str:
        values = [float(r[key]) for r in group_rows if r.get(key) not in (None, "")]
        return "-" if not values else f"{scale * statistics.fmean(values):.{digits}f}"

    for (group, label), members in groups.items():
        lines.append(
            f"| {group} | {label} | {len(members)} | {mean(members, 'in_distribution_top1')} "
            f"| {mean(members, 'shifted_top1')} | {mean(members, 'shifted_cue_follow')} "
            f"| {mean(members, 'shifted_top1_negative_off')} "
            f"| {mean(members, 'mass_ratio_positive_actor', 1, 2)} / {mean(members, 'mass_ratio_negative_actor', 1, 2)} "
            f"| {mean(members, 'mass_ratio_positive_distractors', 1, 2)} / "
            f"{mean(members, 'mass_ratio_negative_distractors', 1, 2)} | {mean(members, 'map_correlation', 1, 2)} "
            f"| {mean(members, 'cos_q_pos_neg', 1, 2)} | {mean(members, 'negative_output_ratio', 1, 2)} |")
    pretrained = [r for r in rows if r["task"] == "source"]
    if pretrained:
        lines += ["", "Pretraining (source task, disjoint classes), test top-1 on its own test split: " + ", ".join(
            f"{label_of(r)} seed {r['seed']} {100 * float(r['source_top1']):.1f}%" for r in pretrained)]
    return "\n".join(lines)


def pilot_report(rows: list[dict], plan: dict) -> str:
    """The pilot's paired spread on the primary metric and the n it implies for the plan."""
    primary = plan["primary"]
    init, metric = primary["dna_init"], primary["metric"]
    a = _values(rows, "pilot", f"dna_{init}", metric)
    b = _values(rows, "pilot", "softmax", metric)
    seeds = sorted(set(a) & set(b))
    result = paired([a[s] for s in seeds], [b[s] for s in seeds], primary["alpha"], primary["power"])
    if result is None:
        return f"the pilot has {len(seeds)} finished pairs; it needs at least 2 (run --groups pilot)"
    target = primary["target_mde"]
    n = pairs_needed(result.sd, target, primary["alpha"], primary["power"], at_least=primary["min_pairs"],
                     at_most=primary["max_pairs"])
    lines = [f"pilot: {result.n} pairs, difference {_points(result.mean)} points, sd of the differences "
             f"{_points(result.sd, False)} points, pair correlation "
             f"{'-' if result.correlation is None else f'{result.correlation:.2f}'}"]
    if n is not None:
        lines.append(f"pairs: {n}  (the smallest n >= {primary['min_pairs']} whose minimum detectable effect at "
                     f"{primary['power']:.0%} power, alpha {primary['alpha']} is <= {100 * target:.0f} points)")
    else:
        from experiments.denoising.stats import minimum_detectable_effect

        most = primary["max_pairs"]
        lines.append(f"pairs: {most}  (the budget's most; even so the minimum detectable effect is "
                     f"{_points(minimum_detectable_effect(result.sd, most, primary['alpha'], primary['power']), False)}"
                     f" points, above the {100 * target:.0f}-point target)")
    return "\n".join(lines)


def calibration_report(rows: list[dict], plan: dict) -> str:
    """Per calibration candidate: its options and softmax's top-1 on its cue-conflicting set."""
    spec = plan["calibration"]
    low, high = spec["target"]
    found = {r["group"]: r for r in rows if r["group"].startswith("calibrate")}
    lines = [f"calibration: softmax fine-tuned from the pretrained model; top-1 on {spec['test_videos']} "
             f"cue-conflicting videos; target {100 * low:.0f}-{100 * high:.0f}%"]
    for i, candidate in enumerate(spec["candidates"]):
        row = found.get(f"calibrate{i}")
        if row is None:
            lines.append(f"  candidate {i} {candidate}: not run")
            continue
        acc = float(row["calibration_top1"])
        lines.append(f"  candidate {i} {candidate}: top-1 {100 * acc:.1f}%, follows the cue "
                     f"{100 * float(row['calibration_cue_follow']):.1f}%: {'inside' if low <= acc <= high else 'outside'}")
    return "\n".join(lines)


def differences_figure(rows: list[dict], plan: dict):
    """Every comparison with at least 2 pairs: its paired difference (points) with the 95%
    interval, and the minimum detectable effect as a band around 0."""
    from matplotlib.figure import Figure

    items = [item for item in comparison_rows(rows, plan) if item["result"] is not None]
    fig = Figure(figsize=(7.0, 0.5 * len(items) + 1.6), layout="constrained")
    ax = fig.add_subplot()
    for y, item in enumerate(items):
        result, comparison = item["result"], item["comparison"]
        colour = "tab:red" if comparison.primary else "tab:blue"
        ax.errorbar(100 * result.mean, y, xerr=[[100 * (result.mean - result.low)], [100 * (result.high - result.mean)]],
                    fmt="o", color=colour, capsize=3)
        ax.plot([-100 * result.mde, 100 * result.mde], [y, y], color="0.6", lw=6, alpha=0.35, solid_capstyle="butt")
        if comparison.threshold is not None:
            ax.plot([100 * comparison.threshold] * 2, [y - 0.35, y + 0.35], color="k", lw=1.5)
    labels = [f"{'PRIMARY: ' if i['comparison'].primary else ''}{i['comparison'].name}\n"
              f"({'shifted' if i['comparison'].metric == 'shifted_top1' else 'in-distribution'} top-1, "
              f"{i['result'].n} pairs)" for i in items]
    ax.set_yticks(range(len(items)), labels, fontsize=7)
    ax.invert_yaxis()
    ax.axvline(0, color="k", lw=0.8)
    ax.set_xlabel("paired difference a - b (percentage points); dot: mean, bar: 95% interval; "
                  "grey: +/- minimum detectable effect", fontsize=8)
    ax.set_title("Denoising experiment: paired differences", fontsize=10)
    ax.grid(axis="x", alpha=0.3)
    return fig


def plots(rows: list[dict], plan: dict, folder: Path) -> list[Path]:
    """The figures of the report, each PNG written whole or not at all."""
    from dna_video.common.atomic import atomic_path

    fig = differences_figure(rows, plan)
    path = folder / "denoising_differences.png"
    with atomic_path(path) as partial:
        fig.savefig(partial, dpi=110, bbox_inches="tight")
    return [path]
