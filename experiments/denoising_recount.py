"""An independent recount of the denoising experiment's published tables: reads the results CSV
(and, for the even-spread column and the cue shares, the rendered test sets' own files), computes
every number of the tables on where the predictions go and on distractor confusion with its own
code (csv, statistics, yaml and scipy only: nothing of ``experiments.denoising`` or ``dna_video``), and
compares them cell by cell with what README.md and docs/denoising.md print: where the
predictions go per arm, every paired comparison (top-1 and distractor confusion; pairs that share
a pretrained start counted as units), the held-out sets' cue shares, and the README verdict's
answer to the confirmatory question (its interval, p, MDE and wording).

    python experiments/denoising_recount.py [--csv experiments/results/denoising.csv] [--data runs/denoising/data]

Exit 0 when every compared cell agrees (to the printed precision), 1 otherwise.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import re
import statistics
import sys
from pathlib import Path

import yaml
from scipy import stats

REPO = Path(__file__).resolve().parents[1]


def arm(row: dict) -> tuple[str, str]:
    return row["group"], row["variant"] + ("" if row["dna_init"] in ("", "-") else "_" + row["dna_init"])


def mean_of(rows: list[dict], key: str) -> float | None:
    values = [float(r[key]) for r in rows if r.get(key)]
    return sum(values) / len(values) if values else None


def labels_and_cues(folder: Path) -> tuple[dict[str, int], dict[str, int]]:
    classes = json.loads((folder / "distractors.json").read_text())["classes"]
    labels = {p.name: classes.index(re.fullmatch(r"(.+)_p\d+_r\d+_v\d+_c\d+\.mp4", p.name).group(1))
              for p in folder.glob("*.mp4")}
    return labels, json.loads((folder / "cues.json").read_text())


def paired(a: list[float], b: list[float], alpha: float = 0.05, power: float = 0.8) -> dict:
    d = [x - y for x, y in zip(a, b)]
    n = len(d)
    mean, sd = statistics.mean(d), statistics.stdev(d)
    t = stats.t.ppf(1 - alpha / 2, n - 1)
    half = t * sd / math.sqrt(n)
    p = stats.ttest_rel(a, b).pvalue if sd > 0 else (1.0 if mean == 0 else 0.0)
    mde = (t + stats.t.ppf(power, n - 1)) * sd / math.sqrt(n)
    return {"n": n, "mean": mean, "low": mean - half, "high": mean + half, "p": float(p), "mde": mde}


def agrees(printed: str, value: float | None, digits: int) -> bool:
    """``printed`` is ``value`` to its precision: within half a unit of its last digit (a value
    exactly halfway, e.g. a mean of 0.1625 shown in points, may be printed rounded either way:
    16.2 or 16.3), a sign or not."""
    if value is None or printed == "-":
        return value is None and printed == "-"
    try:
        shown = float(printed)
    except ValueError:
        return False
    return abs(shown - value) <= 0.5 * 10 ** -digits + 1e-9


def table_rows(text: str, header_start: str) -> list[list[str]]:
    """The cells of the markdown table whose header line starts with ``header_start``."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header_start))
    out = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        out.append([c.strip() for c in line.strip().strip("|").split("|")])
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--csv", default=str(REPO / "experiments/results/denoising.csv"))
    parser.add_argument("--data", default=str(REPO / "runs/denoising/data"), help="the grid's rendered data")
    args = parser.parse_args(argv)
    with open(args.csv, newline="") as f:
        rows = list(csv.DictReader(f))
    checked, wrong = 0, []

    def check(where: str, printed: str, value: float | None, digits: int = 1, scale: float = 100.0) -> None:
        nonlocal checked
        mine = "-" if value is None else f"{scale * value:.{digits}f}"
        if not agrees(printed, None if value is None else scale * value, digits):
            wrong.append(f"{where}: printed {printed}, recounted {mine}")
        checked += 1

    # 1. Where the predictions go, per arm (docs/denoising.md).
    shifted = Path(args.data) / "test_shifted"
    share_is_label = None
    if shifted.is_dir():
        labels, cues = labels_and_cues(shifted)
        share_is_label = sum((cues[v] + 1) % 5 == labels[v] for v in labels) / len(labels)
        print(f"shifted set ({len(labels)} videos, its files): the distractor performs the label's motion in "
              f"{100 * share_is_label:.1f}%, cue-conflicting {100 * sum(cues[v] != labels[v] for v in labels) / len(labels):.1f}%")
        inside_labels, inside_cues = labels_and_cues(Path(args.data) / "test_in_distribution")
        conflicting = sum(inside_cues[v] != inside_labels[v] for v in inside_labels)
        print(f"in-distribution set: {conflicting} of {len(inside_labels)} cue-conflicting")
        docs_text = (REPO / "docs/denoising.md").read_text()
        if f"{conflicting:,} of {len(inside_labels):,} ({100 * conflicting / len(inside_labels):.1f}%)" not in docs_text:
            wrong.append("docs: the in-distribution set's cue-conflicting count")
        checked += 1
    docs = (REPO / "docs/denoising.md").read_text()
    arms: dict[tuple[str, str], list[dict]] = {}
    for row in rows:
        if row["task"] == "target":
            arms.setdefault(arm(row), []).append(row)
    printed = {(c[0], c[1]): c for c in table_rows(docs, "| group | arm | runs | true |")}
    whole_plan = yaml.safe_load((REPO / "experiments/denoising_plan.yaml").read_text())
    plan = whole_plan["confirmatory"]
    planned = int(plan["pairs"])
    planned_primary = int(whole_plan["primary"]["pairs"])
    confirm_pairs = len({r["seed"] for r in arms.get(("confirm", "softmax"), [])} &
                        {r["seed"] for r in arms.get(("confirm", plan["variant"]), [])})
    pending = confirm_pairs < planned
    shares: dict[str, list[float]] = {"cue": [], "even cue": [], "distractor": []}  # the verdict's spans
    for key, members in arms.items():
        true, cue, distractor = (mean_of(members, k) for k in ("shifted_top1", "shifted_cue_follow",
                                                               "shifted_distractor_confusion"))
        if distractor is None:
            continue
        even_cue = (1 - true) / 4  # the errors spread evenly over the four wrong labels
        if not (key[0] == "confirm" and pending):
            shares["cue"].append(cue)
            shares["even cue"].append(even_cue)
            shares["distractor"].append(distractor)
        cells = printed.get(key)
        if key[0] == "confirm" and pending:  # no interim look: shown once every planned pair is in
            if cells is not None:
                wrong.append(f"docs: the confirmatory arm {key} is shown with {confirm_pairs} of {planned} pairs")
            checked += 1
            continue
        if cells is None:
            wrong.append(f"docs: no outcomes line for {key}")
            continue
        where = "/".join(key)
        check(f"{where} runs", cells[2], len(members), 0, 1)
        check(f"{where} true", cells[3], true)
        check(f"{where} cue", cells[4], cue)
        check(f"{where} distractor", cells[5], distractor)
        check(f"{where} other", cells[6], 1 - true - cue - distractor)
        printed_even_cue, even_distractor = (c.strip() for c in cells[7].split("/"))
        check(f"{where} even cue", printed_even_cue, even_cue)
        if share_is_label is not None:
            check(f"{where} even distractor", even_distractor, (1 - true) * (1 - share_is_label) / 4)
        check(f"{where} in-dist. confusion", cells[8], mean_of(members, "in_distribution_distractor_confusion"))
        check(f"{where} negative off", cells[9], mean_of(members, "shifted_distractor_confusion_negative_off"))
        plus, minus = (c.strip() for c in cells[10].split("/"))
        check(f"{where} mass +", plus, mean_of(members, "mass_ratio_positive_distractors"), 2, 1)
        check(f"{where} mass -", minus, mean_of(members, "mass_ratio_negative_distractors"), 2, 1)

    # 2. Every comparison (docs/denoising.md: top-1, then distractor confusion; the README's
    # table holds the preregistered lines and the pretraining's bar, the same lines).
    inits = {"random": ("primary", "dna_random"), "scaled_copy": ("finetune_init", "dna_scaled_copy"),
             "orthogonal": ("finetune_init", "dna_orthogonal")}
    columns = {"shifted top-1": "shifted_top1", "in-dist. top-1": "in_distribution_top1",
               "shifted confusion": "shifted_distractor_confusion",
               "in-dist. confusion": "in_distribution_distractor_confusion"}
    confirmatory = None  # its paired result, once every planned pair is in
    lines = table_rows(docs[docs.index("Paired differences a - b"):], "| comparison |")
    lines += table_rows(docs[docs.index("Distractor confusion: the share"):], "| comparison |")
    printed_lines = {"| " + " | ".join(c) + " |" for c in lines}
    for cells in table_rows((REPO / "README.md").read_text(), "| comparison |"):
        if "| " + " | ".join(cells) + " |" not in printed_lines:
            wrong.append(f"README's line is not docs/denoising.md's: {cells[0]}")
        checked += 1
    for cells in lines:
        name, column = cells[0], columns[cells[1]]
        bare = re.sub(r"\*\*\w+\*\*: ", "", name.split(" (a fine-tuning arm")[0])
        if bare.startswith("confirmatory"):
            a_arm, b_arm = ("confirm", bare.split(": ")[-1].split(" - ")[0]), ("confirm", "softmax")
        elif bare.startswith("from scratch"):
            a_arm, b_arm = ("scratch", bare.split(": ")[1].split(" - ")[0]), ("scratch", "softmax")
        elif bare.startswith("pretraining pays"):
            a_arm, b_arm = ("primary", "softmax"), ("scratch", "softmax")
        elif bare.startswith("pilot"):
            a_arm, b_arm = ("pilot", "dna_" + re.search(r"\((\w+)\)", bare).group(1)), ("pilot", "softmax")
        elif bare.startswith("fine-tuned"):
            a_arm, b_arm = inits[re.search(r"\((\w+)\)", bare).group(1)], ("primary", "softmax")
        elif bare == "DnA-pretrained DnA - softmax-pretrained softmax":
            a_arm, b_arm = ("dna_pretrained", "dna"), ("primary", "softmax")
        elif bare.startswith("DnA-pretrained DnA - softmax-pretrained DnA"):
            a_arm, b_arm = ("dna_pretrained", "dna"), inits[re.search(r"\((\w+)\)", bare).group(1)]
        else:
            wrong.append(f"an unknown comparison: {name}")
            continue
        a = {r["seed"]: (float(r[column]), r["start"]) for r in arms.get(a_arm, []) if r.get(column)}
        b = {r["seed"]: (float(r[column]), r["start"]) for r in arms.get(b_arm, []) if r.get(column)}
        seeds = sorted(set(a) & set(b), key=int)
        check(f"{name} pairs", cells[2].split()[0], len(seeds), 0, 1)
        wanted = planned if bare.startswith("confirmatory") else planned_primary if "**primary**" in name else None
        if wanted is not None and len(seeds) < wanted:  # a preregistered test: made once, on all its pairs
            if cells[2] != f"{len(seeds)} of {wanted} (incomplete: not tested)" or set(cells[4:]) != {"-"}:
                wrong.append(f"{name}: {len(seeds)} of {wanted} pairs, printed as tested: {cells[2:]}")
            checked += 1
            continue
        if len(seeds) < 2:
            continue
        # Pairs whose runs share a pretrained start are one unit (their mean) when the arm's
        # pairs come from several starts but fewer than the pairs.
        units: dict[tuple, list[str]] = {}
        for seed in seeds:
            key = tuple(x for x in (a[seed][1], b[seed][1]) if x not in ("", "-")) or (seed,)
            units.setdefault(key, []).append(seed)
        if 1 < len(units) < len(seeds):
            xa = [statistics.mean(a[s][0] for s in members) for members in units.values()]
            xb = [statistics.mean(b[s][0] for s in members) for members in units.values()]
            check(f"{name} units", re.search(r"\((\d+) starts", cells[2]).group(1), len(units), 0, 1)
        else:
            xa, xb = [a[s][0] for s in seeds], [b[s][0] for s in seeds]
        result = paired(xa, xb)
        check(f"{name} a", cells[4], statistics.mean(a[s][0] for s in seeds))
        check(f"{name} b", cells[5], statistics.mean(b[s][0] for s in seeds))
        diff = re.match(r"([+-][\d.]+) \[([+-][\d.]+), ([+-][\d.]+)\]", cells[6])
        check(f"{name} a - b", diff.group(1), result["mean"])
        check(f"{name} low", diff.group(2), result["low"])
        check(f"{name} high", diff.group(3), result["high"])
        check(f"{name} p", cells[7], result["p"], 3, 1)
        check(f"{name} MDE", cells[8], result["mde"])
        print(f"{bare} ({cells[1]}): {len(seeds)} pairs, {result['n']} units, {100 * result['mean']:+.2f} points "
              f"[{100 * result['low']:+.2f}, {100 * result['high']:+.2f}], p {result['p']:.4f}, MDE {100 * result['mde']:.2f}")
        if bare.startswith("confirmatory"):
            confirmatory = result

    # 3. The README's verdict: its answer to the confirmatory question, once all its pairs are in
    # (before, that it says none is tested).
    verdict = " ".join((REPO / "README.md").read_text().split("<!-- denoising verdict -->")[1]
                       .split("<!-- end denoising verdict -->")[0].split())
    spans = re.search(r"\((\d+) arms\): the cue's label ([\d.]+)-([\d.]+)% of the videos, where errors spread evenly "
                      r"over the wrong labels give ([\d.]+)-([\d.]+)% .*? the distractor's own motion class "
                      r"([\d.]+)-([\d.]+)%", verdict)
    if spans is None:
        wrong.append("README verdict: no spans of the cue's and the distractor's shares over the arms")
    else:
        check("verdict arms", spans.group(1), len(shares["cue"]), 0, 1)
        for (name, values), (low, high) in zip(shares.items(), ((2, 3), (4, 5), (6, 7))):
            check(f"verdict {name} lowest", spans.group(low), min(values))
            check(f"verdict {name} highest", spans.group(high), max(values))
    if pending:
        if f"has {confirm_pairs} of its {planned} planned pairs: no test is made" not in verdict:
            wrong.append(f"README verdict: does not say the confirmatory question has {confirm_pairs} of {planned} pairs")
        checked += 1
    elif confirmatory is None:
        wrong.append("docs: no confirmatory line with its numbers")
    else:
        said = re.search(r"(\d+) pairs of their own seeds: DnA minus softmax ([+-][\d.]+) points \[([+-][\d.]+), "
                         r"([+-][\d.]+)\], p = ([\d.e+-]+), minimum detectable effect ([\d.]+) points", verdict)
        if said is None:
            wrong.append("README verdict: no answer to the confirmatory question with its interval, p and MDE")
        else:
            check("verdict confirmatory pairs", said.group(1), confirmatory["n"], 0, 1)
            check("verdict confirmatory a - b", said.group(2), confirmatory["mean"])
            check("verdict confirmatory low", said.group(3), confirmatory["low"])
            check("verdict confirmatory high", said.group(4), confirmatory["high"])
            if said.group(5) != f"{confirmatory['p']:.2g}":
                wrong.append(f"verdict confirmatory p: printed {said.group(5)}, recounted {confirmatory['p']:.2g}")
            checked += 1
            check("verdict confirmatory MDE", said.group(6), confirmatory["mde"])
            low, high = confirmatory["low"], confirmatory["high"]
            answer = "DnA lowers it" if high < 0 else "DnA raises it" if low > 0 else "no difference is found"
            if answer not in verdict[said.end():said.end() + 200]:
                wrong.append(f"README verdict: the confirmatory answer is not '{answer}' (interval {low:+.4f}, {high:+.4f})")
            checked += 1

    print(f"\n{checked} printed numbers recounted; {len(wrong)} disagree")
    for line in wrong:
        print("  " + line)
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
