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

from experiments.denoising.design import Cell, comparisons, confusion_comparisons
from experiments.denoising.stats import pairs_needed, paired

__all__ = ["COLUMNS", "csv_row", "read_csv", "write_results", "cell_name", "label_of", "table", "key_table",
           "comparison_table", "confusion_table", "arms_table", "outcomes", "outcomes_table", "data_facts", "data_text",
           "verdict", "reading", "settled", "pretraining_verdict", "pilot_report", "calibration_report",
           "differences_figure", "plots"]

SETS = ("in_distribution", "shifted", "source")
COLUMNS = [
    "group", "variant", "dna_init", "seed", "task", "start", "epochs",
    *[f"{s}_{m}" for s in SETS for m in ("top1", "conflict_top1", "cue_follow")],
    "shifted_top1_negative_off",
    "mass_ratio_positive_actor", "mass_ratio_positive_distractors",
    "mass_ratio_negative_actor", "mass_ratio_negative_distractors",
    "map_correlation", "cos_q_pos_neg", "negative_output_ratio",
    "calibration_top1", "calibration_cue_follow",
    # Where the predictions go: the share of a set's videos predicted as the distractor's own class.
    "in_distribution_distractor_confusion", "shifted_distractor_confusion",
    "shifted_distractor_confusion_negative_off", "calibration_distractor_confusion",
    "commit", "cpu", "cpu_capability", "threads", "fit_seconds",
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


def _starts(rows: list[dict], group: str, label: str) -> dict[int, str]:
    """Per pair seed, the cell a run of the arm starts from (``-``: from scratch)."""
    return {int(r["seed"]): r.get("start") or "-" for r in rows if r["group"] == group and label_of(r) == label}


def _points(x: float, signed: bool = True) -> str:
    return f"{100 * x:+.1f}" if signed else f"{100 * x:.1f}"


METRIC_LABELS = {
    "shifted_top1": "shifted top-1",
    "in_distribution_top1": "in-dist. top-1",
    "shifted_distractor_confusion": "shifted confusion",
    "in_distribution_distractor_confusion": "in-dist. confusion",
}


def comparison_rows(rows: list[dict], plan: dict, which: list | None = None) -> list[dict]:
    """Per comparison (default: the design's on top-1), its paired statistics on its metric.

    Pairs are independent only if their runs start from different models: where several pairs
    share a pretrained start but not all do (e.g. 5 fine-tunes from 3 pretrainings), each start
    is one unit, the mean of its pairs (``units`` < ``pairs``); where all share one, the pairs
    are analysed as pairs and the comparison holds for that one pretrained model (``starts``)."""
    alpha, power = plan["primary"]["alpha"], plan["primary"]["power"]
    out = []
    for comparison in (comparisons(plan) if which is None else which):
        a = _values(rows, *comparison.a, comparison.metric)
        b = _values(rows, *comparison.b, comparison.metric)
        seeds = sorted(set(a) & set(b))
        starts_a, starts_b = _starts(rows, *comparison.a), _starts(rows, *comparison.b)
        units: dict[tuple, list[int]] = {}
        for s in seeds:
            key = tuple(x for x in (starts_a[s], starts_b[s]) if x != "-") or (s,)
            units.setdefault(key, []).append(s)
        clustered = 1 < len(units) < len(seeds)
        if clustered:
            xa = [statistics.fmean(a[s] for s in members) for members in units.values()]
            xb = [statistics.fmean(b[s] for s in members) for members in units.values()]
        else:
            xa, xb = [a[s] for s in seeds], [b[s] for s in seeds]
        # A preregistered question is tested once, on all its planned pairs (the plan's stopping
        # rule): before that its pairs are counted, and nothing of the metric is shown.
        planned = _planned_pairs(comparison, plan)
        incomplete = planned is not None and len(seeds) < planned
        result = paired(xa, xb, alpha, power) if len(xa) >= 2 and not incomplete else None
        distinct = [len({starts[s] for s in seeds} - {"-"}) for starts in (starts_a, starts_b)]
        out.append({"comparison": comparison, "seeds": seeds, "result": result, "units": len(xa),
                    "clustered": clustered, "starts": distinct, "planned": planned, "incomplete": incomplete,
                    "a_mean": statistics.fmean(a[s] for s in seeds) if seeds else None,
                    "b_mean": statistics.fmean(b[s] for s in seeds) if seeds else None})
    return out


def settled(rows: list[dict], plan: dict) -> list[dict]:
    """``rows`` without the confirmatory question's while it has fewer than its planned pairs:
    its arms' means would show the difference before the test (the plan: no interim look)."""
    spec = plan.get("confirmatory") or {}
    if not spec.get("pairs"):
        return rows
    variant = spec["variant"]
    found = {r["seed"] for r in rows if r["group"] == "confirm" and r["variant"] == "softmax"} & \
        {r["seed"] for r in rows if r["group"] == "confirm" and r["variant"] == variant}
    return rows if len(found) >= int(spec["pairs"]) else [r for r in rows if r["group"] != "confirm"]


def _planned_pairs(comparison, plan: dict) -> int | None:
    """A preregistered comparison's planned number of pairs (the primary's, the confirmatory
    question's; None for the exploratory ones): each is tested once, on all of them."""
    section = "primary" if comparison.primary else "confirmatory" if comparison.confirmatory else None
    if section is None:
        return None
    pairs = (plan.get(section) or {}).get("pairs")
    return int(pairs) if pairs else None


def pretraining_verdict(rows: list[dict], plan: dict) -> dict | None:
    """The pretraining bar's comparison (fine-tuned softmax - from-scratch softmax, in
    distribution) with ``failed``: below the plan's bar; None before both arms have 2 pairs."""
    for item in comparison_rows(rows, plan):
        if item["comparison"].threshold is not None and item["result"] is not None:
            return item | {"failed": item["result"].mean < item["comparison"].threshold}
    return None


def table(rows: list[dict], plan: dict) -> str:
    """The report: the comparisons (top-1, then distractor confusion), the verdict, then per arm
    the means of every measure and where the predictions go, and the data's cue shares."""
    return "\n\n".join([comparison_table(rows, plan), confusion_table(rows, plan), verdict(rows, plan),
                        arms_table(settled(rows, plan)), outcomes_table(rows, plan), reading(rows, plan),
                        data_text(plan)])


_HEADER = ["| comparison | metric | pairs | pretrained starts a / b | a | b | a - b [95% CI] | p | MDE | pair corr. |",
           "|---|---|---:|---|---:|---:|---|---:|---:|---:|"]


def _comparison_lines(items: list[dict], pretraining: dict | None) -> list[str]:
    lines = list(_HEADER)
    for item in items:
        comparison, result = item["comparison"], item["result"]
        name = comparison.name
        if comparison.primary:
            name = "**primary**: " + name
            if pretraining is not None and pretraining["failed"]:
                name += " (a fine-tuning arm whose pretraining failed its bar)"
        elif comparison.confirmatory:
            name = "**confirmatory**: " + name
        metric = METRIC_LABELS.get(comparison.metric, comparison.metric)
        starts = " / ".join(str(k) if k else "-" for k in item["starts"]) if item["seeds"] else "-"
        pairs = f"{len(item['seeds'])}" + (f" ({item['units']} starts, one unit each)" if item["clustered"] else "")
        if item.get("incomplete"):
            pairs = f"{len(item['seeds'])} of {item['planned']} (incomplete: not tested)"
        if result is None:
            lines.append(f"| {name} | {metric} | {pairs} | {starts} | - | - | - | - | - | - |")
            continue
        verdict = ""
        if comparison.threshold is not None:
            verdict = " (clears the bar)" if result.mean >= comparison.threshold else \
                f" (**below the {100 * comparison.threshold:.0f}-point bar: arm failed**)"
        corr = "-" if result.correlation is None else f"{result.correlation:.2f}"
        lines.append(
            f"| {name} | {metric} | {pairs} | {starts} | {_points(item['a_mean'], False)} "
            f"| {_points(item['b_mean'], False)} | {_points(result.mean)} [{_points(result.low)}, {_points(result.high)}]"
            f"{verdict} | {result.p:.3f} | {_points(result.mde, False)} | {corr} |")
    return lines


def comparison_table(rows: list[dict], plan: dict) -> str:
    """One line per top-1 comparison of the design (the README's table)."""
    lines = [
        "Paired differences a - b (percentage points) over the pair seeds both arms have; 95% t-interval, "
        "two-sided paired t-test p, minimum detectable effect (80% power, alpha 0.05) and the correlation of "
        "the two arms across pairs. Pretrained starts: how many pretrained models the runs of each arm start "
        "from (- : from scratch); with 1, a comparison holds for that one pretrained model.",
        "",
    ]
    return "\n".join(lines + _comparison_lines(comparison_rows(rows, plan), pretraining_verdict(rows, plan)))


def confusion_table(rows: list[dict], plan: dict) -> str:
    """One line per distractor-confusion comparison, the confirmatory question first."""
    lines = [
        "Distractor confusion: the share of a held-out set's videos predicted as the distractor's own motion "
        "class (not the label); differences a - b in percentage points, as above. Only the confirmatory line "
        "tests a question fixed before its runs; the others were chosen after the grid showed where the "
        "predictions go.",
        "",
    ]
    items = comparison_rows(rows, plan, confusion_comparisons(plan))
    return "\n".join(lines + _comparison_lines(items, pretraining_verdict(rows, plan)))


def key_table(rows: list[dict], plan: dict) -> str:
    """The README's table: the two preregistered comparisons (the primary's top-1, the
    confirmatory question's distractor confusion) and the pretraining's bar; every comparison is
    in :func:`comparison_table` and :func:`confusion_table` (docs/denoising.md)."""
    items = [item for item in comparison_rows(rows, plan) + comparison_rows(rows, plan, confusion_comparisons(plan))
             if item["comparison"].preregistered or item["comparison"].threshold is not None]
    lines = ["The preregistered comparisons and the pretraining's bar: paired a - b in points, 95% t-interval, "
             "paired t-test p, minimum detectable effect (80% power, alpha 0.05), the arms' correlation; "
             "pretrained starts per arm (- : from scratch).", ""]
    return "\n".join(lines + _comparison_lines(items, pretraining_verdict(rows, plan)))


def _arm_mean(rows: list[dict], group: str, label: str, key: str) -> float | None:
    values = [float(r[key]) for r in rows if r["group"] == group and label_of(r) == label and r.get(key) not in (None, "")]
    return statistics.fmean(values) if values else None


def _arms(rows: list[dict]) -> dict[tuple[str, str], list[dict]]:
    groups: dict[tuple[str, str], list[dict]] = {}
    for row in rows:
        if row["task"] == "target":
            groups.setdefault((row["group"], label_of(row)), []).append(row)
    return groups


def arms_table(rows: list[dict]) -> str:
    """Per arm, the means over its pair seeds of every measure, and the pretraining runs."""
    lines = ["Per arm, mean over pair seeds (top-1 and rates in %; mass ratio: share of the cls token's spatial "
             "attention on a region over the region's share of the patches, 1 = uniform; means over blocks and heads).",
             "", "| group | arm | runs | in-dist. top-1 | shifted top-1 | follows the cue (shifted) | negative off "
             "(shifted) | actor ratio +/- | distractor ratio +/- | corr(+, -) | cos(q+, -q-) | ‖neg‖/‖pos‖ |",
             "|---|---|---:|---:|---:|---:|---:|---|---|---:|---:|---:|"]

    def mean(group_rows: list[dict], key: str, scale: float = 100.0, digits: int = 1) -> str:
        values = [float(r[key]) for r in group_rows if r.get(key) not in (None, "")]
        return "-" if not values else f"{scale * statistics.fmean(values):.{digits}f}"

    for (group, label), members in _arms(rows).items():
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


def outcomes(rows: list[dict], group: str, label: str, plan: dict) -> dict | None:
    """Where an arm's shifted-set predictions go, means over its runs (fractions): ``true``,
    ``cue`` (the cue's label; every shifted video's cue points to a wrong label), ``distractor``
    (the distractor's own class, not the label), ``other``; and what spreading the errors evenly
    over the wrong labels would give for the cue and the distractor."""
    true, cue, distractor = (_arm_mean(rows, group, label, k) for k in
                             ("shifted_top1", "shifted_cue_follow", "shifted_distractor_confusion"))
    if true is None or cue is None or distractor is None:
        return None
    facts = data_facts(plan)["shifted"]
    wrong = facts["classes"] - 1
    return {"true": true, "cue": cue, "distractor": distractor, "other": 1.0 - true - cue - distractor,
            "even_cue": (1.0 - true) / wrong,
            "even_distractor": (1.0 - true) * (1.0 - facts["distractor_is_label"] / facts["videos"]) / wrong}


def outcomes_table(rows: list[dict], plan: dict) -> str:
    """Per arm: where its predictions on the shifted set go (the table the cue is judged by),
    distractor confusion in distribution and with the negative branch off, and the attention
    mass on the distractor (its counterpart in the maps)."""
    lines = ["Where the predictions go, per arm (mean over its runs, % of the set's videos; the shifted set's four "
             "columns add up to 100). Even spread: what the cue's and the distractor's columns would be if the "
             "errors spread evenly over the four wrong labels (the distractor performs the label's own motion in "
             f"{_percent_of(data_facts(plan)['shifted'])} of the shifted videos, which count as true). Distractor "
             "mass ratio: the cls token's attention on the distractor over its share of the patches (+ / -: "
             "positive / negative map; 256 shifted videos).",
             "", "| group | arm | runs | true | cue's label | distractor's class | other | even spread: cue / "
             "distractor | in-dist. confusion | shifted confusion, negative off | distractor mass ratio +/- |",
             "|---|---|---:|---:|---:|---:|---:|---|---:|---:|---|"]

    def text(value: float | None, scale: float = 100.0, digits: int = 1) -> str:
        return "-" if value is None else f"{scale * value:.{digits}f}"

    rows = settled(rows, plan)
    for (group, label), members in _arms(rows).items():
        found = outcomes(rows, group, label, plan)
        if found is None:
            continue
        lines.append(
            f"| {group} | {label} | {len(members)} | {text(found['true'])} | {text(found['cue'])} "
            f"| {text(found['distractor'])} | {text(found['other'])} | {text(found['even_cue'])} / "
            f"{text(found['even_distractor'])} | {text(_arm_mean(rows, group, label, 'in_distribution_distractor_confusion'))} "
            f"| {text(_arm_mean(rows, group, label, 'shifted_distractor_confusion_negative_off'))} "
            f"| {text(_arm_mean(rows, group, label, 'mass_ratio_positive_distractors'), 1, 2)} / "
            f"{text(_arm_mean(rows, group, label, 'mass_ratio_negative_distractors'), 1, 2)} |")
    return "\n".join(lines)


def _percent_of(facts: dict, key: str = "distractor_is_label") -> str:
    return f"{facts[key]:,} of {facts['videos']:,} ({100 * facts[key] / facts['videos']:.1f}%)"


def data_facts(plan: dict, quick: bool = False) -> dict[str, dict]:
    """Per held-out set, from the generator's own plan of it (the function that writes its
    ``cues.json``): ``videos``, ``classes``, ``cue_rate``, ``conflicting`` (the cue points to
    another label) and ``distractor_is_label`` (the distractor performs the label's motion)."""
    from dna_video.data.scenes import class_names_of, cue_label_of, cue_motion
    from dna_video.data.synthetic import heldout_plan

    from experiments.denoising.design import TEST_SETS, test_set_options

    out = {}
    for name in TEST_SETS:
        options = test_set_options(plan, name, quick)
        names = class_names_of(options.get("classes", "target"))
        rate = options.get("test_cue_rate", options["cue_rate"])
        videos = heldout_plan(options.get("seed", 0), options["test_videos"], names)
        cues = [(label, cue_label_of(label, seed, rate, len(names))) for _, label, seed in videos]
        out[name] = {"videos": len(videos), "classes": len(names), "cue_rate": rate,
                     "conflicting": sum(c != y for y, c in cues),
                     "distractor_is_label": sum(cue_motion(c, len(names)) == y for y, c in cues)}
    return out


def data_text(plan: dict) -> str:
    """The held-out sets' cue shares, counted from the data's plan (docs/denoising.md)."""
    facts = data_facts(plan)
    inside, shifted = facts["in_distribution"], facts["shifted"]
    return (f"The held-out sets, counted from the generator's plan of them: in distribution (cue rate "
            f"{inside['cue_rate']:g}), {_percent_of(inside, 'conflicting')} videos are cue-conflicting "
            f"({100 * (1 - inside['cue_rate']):.0f}% by construction) and in {_percent_of(inside)} the distractor "
            f"performs the label's motion; on the shifted set (cue rate {shifted['cue_rate']:g}) "
            f"{_percent_of(shifted, 'conflicting')} are cue-conflicting and in {_percent_of(shifted)} the "
            f"distractor performs the label's motion (a quarter by construction: the cue points to the label "
            f"before it).")


def _paper_effects() -> tuple[float, float]:
    """The smallest and largest DnA - softmax gain the paper reports (points; experiments.paper)."""
    from experiments.paper import EXPERIMENTS

    effects = [delta for _, delta in EXPERIMENTS.values() if delta is not None]
    return min(effects), max(effects)


def _ci(result) -> str:
    return f"{_points(result.mean)} points [{_points(result.low)}, {_points(result.high)}], p = {result.p:.2g}"


def verdict(rows: list[dict], plan: dict) -> str:
    """The README's verdict, every number from the rows: the primary comparison as what it is
    (a fine-tuning arm, judged by its pretraining's bar, its MDE beside the paper's effects),
    the cue by where the predictions go, the confirmatory question's answer, the scope."""
    items = {item["comparison"].name: item for item in comparison_rows(rows, plan)}
    confusion = comparison_rows(rows, plan, confusion_comparisons(plan))
    primary = next(item for item in items.values() if item["comparison"].primary)
    pretraining = pretraining_verdict(rows, plan)
    low, high = _paper_effects()
    parts = ["**What it says.**"]
    result = primary["result"]
    if result is None and primary["incomplete"] and primary["seeds"]:
        parts.append(f"The preregistered primary comparison (a fine-tuning arm, shifted top-1) has "
                     f"{len(primary['seeds'])} of its {primary['planned']} planned pairs: no test is made before "
                     f"all are in.")
    if result is not None:
        what = "The preregistered primary comparison is a fine-tuning arm"
        if pretraining is not None:
            bar = pretraining["comparison"].threshold
            if pretraining["failed"]:
                bar_result = pretraining["result"]
                what += (f" whose pretraining failed its own bar: fine-tuned minus from-scratch softmax in "
                         f"distribution is {_points(bar_result.mean)} points [{_points(bar_result.low)}, "
                         f"{_points(bar_result.high)}] ({bar_result.n} pairs; bar: +{100 * bar:.0f}), so by the plan it "
                         f"says nothing about the paper's setting (though an interval this wide cannot tell)")
            else:
                what += f" whose pretraining cleared its bar ({_points(pretraining['result'].mean)} points, bar +{100 * bar:.0f})"
        starts = primary["starts"][0]
        parts.append(
            f"{what}. On it, DnA minus softmax on the shifted set is {_ci(result)} ({result.n} pairs"
            + (", all from one pretrained softmax model" if starts == 1 else "") + "). "
            f"Its minimum detectable effect (80% power) is {_points(result.mde, False)} points, against "
            f"the paper's gains of +{low:.1f} to +{high:.1f} (accuracy on real data, another measure): "
            + ("it could not have seen them." if result.mde > high / 100 else
               f"it could have seen the larger ones, not those under {_points(result.mde, False)}."
               if result.mde > low / 100 else "it could have seen them."))
    found = [o for o in (outcomes(rows, group, label, plan) for group, label in _arms(settled(rows, plan)))
             if o is not None]
    if found:
        def span(key: str) -> str:
            values = [o[key] for o in found]
            return f"{_points(min(values), False)}-{_points(max(values), False)}%"

        above = [o["cue"] - o["even_cue"] for o in found]
        parts.append(
            f"Where the predictions go on the shifted set ({len(found)} arms): the cue's label "
            f"{span('cue')} of the videos, where errors spread evenly over the wrong labels give {span('even_cue')} "
            f"(arm by arm {_points(min(above))} to {_points(max(above))} points from it); the distractor's own motion "
            f"class {span('distractor')} (even spread {span('even_distractor')}). "
            + ("The models take the distractor for the actor far more than they follow the cue: the "
               "attention error DnA claims to fix." if all(o["distractor"] > max(o["cue"], o["even_distractor"])
                                                             for o in found)
               else "Not every arm takes the distractor for the actor more than it follows the cue."))
    confirm = next((item for item in confusion if item["comparison"].confirmatory), None)
    spec = plan.get("confirmatory") or {}
    if confirm is not None and spec.get("pairs"):
        res = confirm["result"]
        wanted = int(spec["pairs"])
        if res is None or len(confirm["seeds"]) < wanted:
            parts.append(f"The confirmatory question (does DnA lower distractor confusion, from scratch?) has "
                         f"{len(confirm['seeds'])} of its {wanted} planned pairs: no test is made before all are in.")
        else:
            answer = ("DnA lowers it" if res.high < 0 else "DnA raises it" if res.low > 0 else
                      "no difference is found")
            parts.append(
                f"The confirmatory question, fixed before its runs: does DnA "
                f"lower distractor confusion on the shifted set, trained from scratch? {res.n} pairs of their own "
                f"seeds: DnA minus softmax {_ci(res)}, minimum detectable effect {_points(res.mde, False)} points "
                f"(planned: {100 * spec['target_mde']:.0f}): {answer}"
                + "."
                + (" After fine-tuning it was not asked: no pretraining pays its bar." if pretraining is not None
                   and pretraining["failed"] else ""))
    group = "confirm" if any(r["group"] == "confirm" for r in settled(rows, plan)) else "scratch"
    variant = spec.get("variant", "dna")
    values = {k: _arm_mean(rows, group, variant, k) for k in (
        "mass_ratio_negative_distractors", "mass_ratio_negative_actor", "mass_ratio_positive_distractors",
        "mass_ratio_positive_actor", "shifted_distractor_confusion", "shifted_distractor_confusion_negative_off")}
    if None not in values.values():
        change = values["shifted_distractor_confusion_negative_off"] - values["shifted_distractor_confusion"]
        parts.append(
            f"In those DnA runs ({group}) the attention on distractor / actor over their area's share is "
            f"{values['mass_ratio_negative_distractors']:.2f} / {values['mass_ratio_negative_actor']:.2f} in the "
            f"negative map, {values['mass_ratio_positive_distractors']:.2f} / "
            f"{values['mass_ratio_positive_actor']:.2f} in the positive; switching the negative branch off moves "
            f"distractor confusion by {_points(change)} points.")
    parts.append("All of it is a 0.37M-parameter model on synthetic motion: it neither supports nor refutes the "
                 "claim for pretrained TimeSformer-B.")
    return "\n".join(_wrap(" ".join(parts)))


def reading(rows: list[dict], plan: dict) -> str:
    """docs/denoising.md's reading of the grid, every number from the rows: the pretraining and
    its bar, the mechanism in the primary's DnA runs, and every exploratory comparison with its
    interval (no correction for multiple comparisons)."""
    commits = sorted({r["commit"][:7] for r in rows if r.get("commit")})
    bullets = []
    pretrained = [r for r in rows if r["task"] == "source" and r.get("source_top1")]
    pretraining = pretraining_verdict(rows, plan)
    if pretrained or pretraining is not None:
        text = "**Pretraining**: "
        if pretrained:
            text += "the source task's test top-1 (its own split): " + ", ".join(
                f"{label_of(r)} seed {r['seed']} {_points(float(r['source_top1']), False)}%" for r in pretrained) + ". "
        if pretraining is not None:
            result, bar = pretraining["result"], pretraining["comparison"].threshold
            text += (f"Fine-tuned softmax minus from-scratch softmax in distribution: {_points(result.mean)} "
                     f"[{_points(result.low)}, {_points(result.high)}] ({result.n} pairs; bar +{100 * bar:.0f}): "
                     + ("below the bar, so the fine-tuning arms failed and \"fine-tuned from a pretrained model\" "
                        "here is not the paper's regime." if pretraining["failed"] else "the bar is cleared."))
        bullets.append(text)
    init = plan["primary"]["dna_init"]
    values = {k: _arm_mean(rows, "primary", f"dna_{init}", k) for k in (
        "mass_ratio_positive_actor", "mass_ratio_positive_distractors", "mass_ratio_negative_actor",
        "mass_ratio_negative_distractors", "map_correlation", "cos_q_pos_neg", "negative_output_ratio",
        "shifted_top1", "shifted_top1_negative_off")}
    if None not in values.values():
        bullets.append(
            f"**Mechanism** in the primary's DnA runs ({plan['map_videos']} shifted videos per run, means over "
            f"blocks and heads): the negative map's mass on the actor and on the distractor is "
            f"{values['mass_ratio_negative_actor']:.2f} and {values['mass_ratio_negative_distractors']:.2f} times "
            f"their area's share (positive map: {values['mass_ratio_positive_actor']:.2f} / "
            f"{values['mass_ratio_positive_distractors']:.2f}); the two maps correlate at "
            f"{values['map_correlation']:.2f}, cos(q+, -q-) is {values['cos_q_pos_neg']:.2f}, the negative branch's "
            f"output is {values['negative_output_ratio']:.2f} of the positive's, and switching it off moves shifted "
            f"top-1 by {_points(values['shifted_top1_negative_off'] - values['shifted_top1'])} points.")
    explored = [item for item in comparison_rows(rows, plan) + comparison_rows(rows, plan, confusion_comparisons(plan))
                if not item["comparison"].preregistered and item["comparison"].threshold is None
                and item["result"] is not None]
    if explored:
        bullets.append("**Exploratory** (no correction for multiple comparisons; a - b in points, 95% interval): " + "; ".join(
            f"{item['comparison'].name} ({METRIC_LABELS.get(item['comparison'].metric, item['comparison'].metric)}) "
            f"{_points(item['result'].mean)} [{_points(item['result'].low)}, {_points(item['result'].high)}], "
            f"{item['result'].n} {'units' if item['clustered'] else 'pairs'}" for item in explored) + ".")
    head = (f"Reading the grid ({len(rows)} rows of `experiments/results/denoising.csv`, from the commits "
            f"{', '.join(commits)}; each row's record beside it):")
    out = [head, ""]
    for bullet in bullets:
        wrapped = _wrap(bullet, 98)
        out += ["- " + wrapped[0]] + ["  " + line for line in wrapped[1:]]
    return "\n".join(out)


def _wrap(text: str, width: int = 100) -> list[str]:
    import textwrap

    return textwrap.wrap(text, width, break_long_words=False, break_on_hyphens=False)


def pilot_report(rows: list[dict], plan: dict) -> str:
    """The pilots' paired spread on their question's metric and the n it implies for the plan:
    the primary's (group ``pilot``) and, when the plan has one, the confirmatory question's
    (its ``pilot`` group, e.g. the grid's from-scratch pairs)."""
    primary = plan["primary"]
    init = primary["dna_init"]
    lines = _pilot_lines("primary", _values(rows, "pilot", f"dna_{init}", primary["metric"]),
                         _values(rows, "pilot", "softmax", primary["metric"]), primary, "pilot (group pilot)")
    spec = plan.get("confirmatory")
    if spec:
        group = spec["pilot"]
        lines += [""] + _pilot_lines("confirmatory", _values(rows, group, spec["variant"], spec["metric"]),
                                     _values(rows, group, "softmax", spec["metric"]), spec,
                                     f"confirmatory pilot (group {group}, {spec['metric']})")
    return "\n".join(lines)


def _pilot_lines(section: str, a: dict, b: dict, spec: dict, title: str) -> list[str]:
    from experiments.denoising.stats import minimum_detectable_effect

    seeds = sorted(set(a) & set(b))
    result = paired([a[s] for s in seeds], [b[s] for s in seeds], spec["alpha"], spec["power"]) if len(seeds) >= 2 else None
    if result is None:
        return [f"{title}: {len(seeds)} finished pairs; it needs at least 2"]
    target = spec["target_mde"]
    n = pairs_needed(result.sd, target, spec["alpha"], spec["power"], at_least=spec["min_pairs"],
                     at_most=spec["max_pairs"])
    lines = [f"{title}: {result.n} pairs, difference {_points(result.mean)} points, sd of the differences "
             f"{_points(result.sd, False)} points, pair correlation "
             f"{'-' if result.correlation is None else f'{result.correlation:.2f}'}"]
    if n is not None:
        lines.append(f"{section} pairs: {n}  (the smallest n >= {spec['min_pairs']} whose minimum detectable effect "
                     f"at {spec['power']:.0%} power, alpha {spec['alpha']} is <= {100 * target:.0f} points: "
                     f"{_points(minimum_detectable_effect(result.sd, n, spec['alpha'], spec['power']), False)})")
    else:
        most = spec["max_pairs"]
        lines.append(f"{section} pairs: {most}  (the budget's most; even so the minimum detectable effect is "
                     f"{_points(minimum_detectable_effect(result.sd, most, spec['alpha'], spec['power']), False)}"
                     f" points, above the {100 * target:.0f}-point target)")
    return lines


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

    items = [item for item in comparison_rows(rows, plan) + comparison_rows(rows, plan, confusion_comparisons(plan))
             if item["result"] is not None]
    fig = Figure(figsize=(7.0, 0.5 * len(items) + 1.6), layout="constrained")
    ax = fig.add_subplot()
    for y, item in enumerate(items):
        result, comparison = item["result"], item["comparison"]
        colour = "tab:red" if comparison.primary else "tab:purple" if comparison.confirmatory else "tab:blue"
        ax.errorbar(100 * result.mean, y, xerr=[[100 * (result.mean - result.low)], [100 * (result.high - result.mean)]],
                    fmt="o", color=colour, capsize=3)
        ax.plot([-100 * result.mde, 100 * result.mde], [y, y], color="0.6", lw=6, alpha=0.35, solid_capstyle="butt")
        if comparison.threshold is not None:
            ax.plot([100 * comparison.threshold] * 2, [y - 0.35, y + 0.35], color="k", lw=1.5)
    labels = [f"{'PRIMARY: ' if i['comparison'].primary else 'CONFIRMATORY: ' if i['comparison'].confirmatory else ''}"
              f"{i['comparison'].name}\n({METRIC_LABELS.get(i['comparison'].metric, i['comparison'].metric)}, "
              f"{i['result'].n} {'units' if i['clustered'] else 'pairs'})" for i in items]
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
