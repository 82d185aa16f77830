"""Does DnA denoise? A controlled experiment on synthetic videos with ground-truth distractors.

    python -m experiments.denoising                  # run the whole grid (resumable), then table + plots
    python -m experiments.denoising --jobs 2         # two runs at a time (one core each)
    python -m experiments.denoising --arms main      # only the first arm (--arms finetune: the second)
    python -m experiments.denoising --dry-run        # the plan, with what is finished
    python -m experiments.denoising --table          # the summary table from the results CSV
    python -m experiments.denoising --plots          # the plots from the results CSV
    python -m experiments.denoising --quick --out /tmp/dn   # a tiny grid, end to end (the test's)

Data: :class:`~dna_video.data.distractors.SyntheticDistractors` at the levels of
:data:`LEVELS` (the same videos rendered without distractors, with distractors on random walks,
and with distractors performing another class's motion beside the actor), each with per-frame
masks of the actor and the distractors.

Arm ``main``: every variant of :data:`VARIANTS` trained from scratch at every level with the
same recipe (``configs/denoising.yaml``), data and seeds; only the attention differs. Arm
``finetune`` (the paper's setting): the softmax model of arm ``main`` trained at level
``none`` (seed s) fine-tuned at each harder level with DnA under each ``dna_init`` policy and
with softmax, :data:`FINETUNE_EPOCHS` epochs.

Each run is ``cli.py fit`` (test after fit) in a process of its own, then measured on its best
checkpoint: test top-1, mean per-class accuracy, RMS calibration error (adaptive
bins), ECE; alpha per block (DnA's per-head alpha averaged over heads; ``diff``: lambda);
the share of the cls token's spatial attention mass on the actor, the distractors and the
background per branch (mean over blocks, heads and test videos; per block in ``cell.json``);
top-1 with the negative branch switched off (alpha = 0; ``diff``: lambda = 0); top-1 on the
same test videos rendered without distractors. A run's measures go to ``cell.json`` beside
it: a finished cell is skipped, an interrupted fit continues from its ``last.ckpt``. The
results CSV (one row per run) is rebuilt from the cells after every run.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.figure import Figure

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "configs" / "denoising.yaml"
RESULTS = REPO / "experiments" / "results"

#: Distractor levels: SyntheticDistractors options (the same seed renders the same videos).
LEVELS: dict[str, dict] = {
    "none": dict(level="none"),
    "random": dict(level="random", num_distractors=2, distractor_size=0.7, similarity=0.0),
    "confusing": dict(level="confusing", num_distractors=1, distractor_size=0.7, similarity=0.0),
}
VARIANTS = ("softmax", "dna", "dna_shared_v", "diff", "cog")
SEEDS = {"softmax": 5, "dna": 5}  # the others: DEFAULT_SEEDS
DEFAULT_SEEDS = 3
FINETUNE_SEEDS = 3
FINETUNE_EPOCHS = 6
DNA_INITS = ("random", "scaled_copy", "orthogonal")
# The quick grid of --quick (a test runs it): tiny data, one epoch, two variants.
QUICK = dict(variants=("softmax", "dna"), levels=("none", "confusing"), seeds=1, epochs=1, finetune_epochs=1,
             inits=("scaled_copy",), data=dict(videos_per_subject_class=1, height=32, width=40, crop_size=32,
                                               train_short_side=[32, 36], batch_size=4, num_frames=4))
# What the generator takes from the data options (the rest is sampling and loading).
SCENE_OPTIONS = ("videos_per_subject_class", "seed", "height", "width")

COLUMNS = [
    "arm", "variant", "level", "seed", "dna_init", "top1", "mca", "rms_calibration_error", "ece",
    "top1_negative_off", "top1_clean", "delta_negative_off", "delta_clean",
    "mass_positive_actor", "mass_positive_distractors", "mass_positive_background",
    "mass_negative_actor", "mass_negative_distractors", "mass_negative_background",
    "area_actor", "area_distractors", "alpha_spatial", "alpha_temporal", "epochs", "fit_seconds", "checkpoint",
]


@dataclass
class Cell:
    """One run of the grid."""

    arm: str  # main | finetune
    variant: str
    level: str
    seed: int
    dna_init: str = "-"
    start: "Cell | None" = field(default=None, repr=False)  # finetune: the run it starts from

    @property
    def name(self) -> str:
        init = "" if self.dna_init == "-" else f"_{self.dna_init}"
        return f"{self.variant}{init}_seed{self.seed}"

    def folder(self, out: Path) -> Path:
        return out / "runs" / self.arm / self.level / self.name / "version_0"

    def done(self, out: Path) -> bool:
        return (self.folder(out) / "cell.json").is_file()


def data_root(out: Path, level: str, quick: bool) -> Path:
    return out / "data" / (f"{level}-quick" if quick else level)


def plan(arms: list[str], quick: bool) -> list[Cell]:
    variants = QUICK["variants"] if quick else VARIANTS
    levels = QUICK["levels"] if quick else tuple(LEVELS)
    inits = QUICK["inits"] if quick else DNA_INITS
    cells: list[Cell] = []
    if "main" in arms or "finetune" in arms:
        for variant in variants:
            seeds = QUICK["seeds"] if quick else SEEDS.get(variant, DEFAULT_SEEDS)
            for level in levels:
                for seed in range(seeds):
                    cells.append(Cell("main", variant, level, seed))
    if "finetune" in arms:
        starts = {(c.level, c.seed): c for c in cells if c.variant == "softmax"}
        if "main" not in arms:  # the starting points still come first
            cells = [c for c in cells if c.variant == "softmax" and c.level == "none"]
        seeds = QUICK["seeds"] if quick else FINETUNE_SEEDS
        for level in levels[1:]:
            for seed in range(seeds):
                for init in inits:
                    cells.append(Cell("finetune", "dna", level, seed, init, starts[("none", seed)]))
                cells.append(Cell("finetune", "softmax", level, seed, "-", starts[("none", seed)]))
    return cells


def fit_command(cell: Cell, out: Path, quick: bool, extra: list[str]) -> list[str]:
    folder = cell.folder(out)
    command = [
        sys.executable, str(REPO / "cli.py"), "fit", "--config", str(CONFIG),
        "--data.init_args.root", str(data_root(out, cell.level, quick)),
        "--model.network.attention", cell.variant, "--seed_everything", str(cell.seed),
        "--trainer.logger.init_args.save_dir", str(folder.parent.parent),
        "--trainer.logger.init_args.name", cell.name, "--trainer.logger.init_args.version", "0",
        "--test_after_fit", "true",
    ]
    for key, value in LEVELS[cell.level].items():
        command += [f"--data.init_args.{key}", str(value)]
    epochs = None
    if quick:
        for key, value in QUICK["data"].items():
            command += [f"--data.init_args.{key}", str(value)]
        epochs = QUICK["finetune_epochs"] if cell.arm == "finetune" else QUICK["epochs"]
    elif cell.arm == "finetune":
        epochs = FINETUNE_EPOCHS
    if epochs is not None:
        command += ["--trainer.max_epochs", str(epochs), "--model.lr_scheduler.init_args.T_max", str(epochs)]
    if cell.arm == "finetune":
        command += ["--model.init.source", best_checkpoint(cell.start.folder(out))]
        if cell.dna_init != "-":
            command += ["--model.init.dna_init", cell.dna_init]
    last = folder / "checkpoints" / "last.ckpt"
    if last.is_file():
        command += ["--ckpt_path", str(last)]  # an interrupted fit continues
    elif folder.is_dir():
        command += ["--overwrite", "true"]  # a fit that died before its first checkpoint starts over
    return command + extra


def best_checkpoint(folder: Path) -> str:
    from dna_video.training.callbacks.run_summary import read_summary

    summary = read_summary(folder)
    checkpoint = summary.get("test", {}).get("checkpoint")
    if not checkpoint:
        raise FileNotFoundError(f"{folder}: no tested best checkpoint in summary.json (did the fit finish?)")
    return checkpoint


# -- measuring one run ------------------------------------------------------------------------
def _alphas(net) -> dict[str, list[float]]:
    """Per block, the negative branch's weight (mean over heads): DnA's alpha, diff's lambda,
    whatever the attention kind declares (``AttentionKind.negative``)."""
    from dna_video.models.attention import kind_of

    out: dict[str, list[float]] = {"spatial": [], "temporal": []}
    for block in net.blocks:
        for path, module in (("spatial", block.attn), ("temporal", block.temporal_attn)):
            kind = kind_of(module)
            if kind is not None and kind.negative is not None:
                out[path].append(float(kind.negative.weight_of(module).detach().float().mean()))
    return out


def measure(folder: Path, clean_root: Path) -> dict:
    """The measures of the run in ``folder`` (its best checkpoint), as a dict of CSV fields
    plus the per-block details."""
    import torch

    from dna_video.analysis.denoising import REGIONS, evaluate_masked, has_negative_branch, negative_branch_off
    from dna_video.analysis.inference import load_model
    from dna_video.analysis.evaluation_report import evaluation_report
    from dna_video.data.distractors import SyntheticDistractors

    checkpoint = best_checkpoint(folder)
    loaded = load_model(checkpoint, warn_defaults=False)
    net = loaded.net
    saved = torch.load(checkpoint, map_location="cpu", weights_only=False)["datamodule_hyper_parameters"]
    data_args = {k: v for k, v in saved.items() if not k.startswith("_")}  # LightningCLI's own entries
    data_args.update(with_masks=True, num_workers=0)

    def loader(**overrides):
        # The data exist (the runner wrote every level first): no prepare_data, no rewrite.
        datamodule = SyntheticDistractors(**{**data_args, **overrides})
        datamodule.setup("test")
        return datamodule.test_dataloader()

    test = evaluate_masked(net, loader())
    report = evaluation_report(test["probs"], test["labels"], loaded.class_names)
    row = {"top1": report["top1"], "mca": report["mca"], "rms_calibration_error": report["rms_calibration_error"],
           "ece": report["ece"]}
    mass = test["mass"]
    positive = mass.get("positive", mass.get("softmax"))
    for branch, values in (("positive", positive), ("negative", mass.get("negative"))):
        for i, region in enumerate(REGIONS):
            row[f"mass_{branch}_{region}"] = None if values is None else float(values[:, i].mean())
    row["area_actor"], row["area_distractors"] = float(test["area"][0]), float(test["area"][1])
    if has_negative_branch(net):
        with negative_branch_off(net):
            off = evaluate_masked(net, loader(), with_maps=False)
        row["top1_negative_off"] = float((off["probs"].argmax(1) == off["labels"]).double().mean())
        row["delta_negative_off"] = row["top1_negative_off"] - row["top1"]
    else:
        row["top1_negative_off"] = row["delta_negative_off"] = None
    if data_args.get("level") != "none":
        clean = evaluate_masked(net, loader(root=str(clean_root), level="none"), with_maps=False)
        row["top1_clean"] = float((clean["probs"].argmax(1) == clean["labels"]).double().mean())
        row["delta_clean"] = row["top1_clean"] - row["top1"]
    else:
        row["top1_clean"], row["delta_clean"] = row["top1"], 0.0
    alphas = _alphas(net)
    row["alpha_spatial"] = " ".join(f"{a:.4f}" for a in alphas["spatial"]) or None
    row["alpha_temporal"] = " ".join(f"{a:.4f}" for a in alphas["temporal"]) or None
    row["checkpoint"] = checkpoint
    details = {"mass_per_block": {k: v.tolist() for k, v in mass.items()}, "area": test["area"].tolist(),
               "per_class_accuracy": report["per_class_accuracy"], "alpha": alphas}
    return {"row": row, "details": details}


def run_cell(cell: Cell, out: Path, quick: bool, extra: list[str], threads: int) -> str | None:
    """Fit and measure ``cell``; None when done, else what failed."""
    folder = cell.folder(out)
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    from dna_video.training.callbacks.run_summary import read_summary

    started = time.time()
    if not read_summary(folder).get("test", {}).get("checkpoint"):
        folder.parent.mkdir(parents=True, exist_ok=True)
        with open(folder.parent / "fit.log", "a") as log:
            code = subprocess.run(fit_command(cell, out, quick, extra), cwd=REPO, env=env, stdout=log,
                                  stderr=subprocess.STDOUT).returncode
        if code != 0:
            return f"fit failed (exit {code}); log: {folder.parent / 'fit.log'}"
    fit_seconds = time.time() - started
    # Measured here, in this worker thread (torch releases the GIL): no second interpreter start.
    try:
        write_cell(folder, data_root(out, "none", quick), fit_seconds)
    except Exception as exc:  # noqa: BLE001 - reported with the cell, the other cells go on
        return f"measuring failed: {type(exc).__name__}: {exc}"
    return None


def write_cell(folder: Path, clean_root: Path, fit_seconds: float) -> None:
    import yaml

    result = measure(folder, clean_root)
    config = yaml.safe_load((folder / "config.yaml").read_text())
    result["row"]["epochs"] = config["trainer"]["max_epochs"]
    result["row"]["fit_seconds"] = round(fit_seconds, 1)
    tmp = folder / "cell.json.tmp"
    tmp.write_text(json.dumps(result, indent=1))
    tmp.replace(folder / "cell.json")


# -- results ----------------------------------------------------------------------------------
def collect(cells: list[Cell], out: Path) -> list[dict]:
    rows = []
    for cell in cells:
        if not cell.done(out):
            continue
        measured = json.loads((cell.folder(out) / "cell.json").read_text())["row"]
        checkpoint = Path(measured["checkpoint"])
        if checkpoint.is_relative_to(REPO):  # the committed CSV names no machine's folders
            measured["checkpoint"] = str(checkpoint.relative_to(REPO))
        rows.append({"arm": cell.arm, "variant": cell.variant, "level": cell.level, "seed": cell.seed,
                     "dna_init": cell.dna_init, **measured})
    return rows


def _number(value: str | float | None) -> float | None:
    if value in (None, "", "None"):
        return None
    return float(value)


def _format(value: float | None, digits: int = 4) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def write_csv(rows: list[dict], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".csv.tmp")
    with open(tmp, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            writer.writerow({k: (_format(v) if isinstance(v, float) else v) for k, v in row.items()})
    tmp.replace(path)


def read_csv(path: Path) -> list[dict]:
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no results yet; run python -m experiments.denoising first")
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _pm(values: list[float], scale: float = 100.0, digits: int = 1, signed: bool = False) -> str:
    """Mean +/- std (sample) of ``values`` x ``scale``; ``signed``: with the sign (differences)."""
    values = [v * scale for v in values if v is not None]
    if not values:
        return "-"
    sign = "+" if signed else ""
    mean = round(statistics.mean(values), digits) + 0.0  # + 0.0: no "-0.0"
    if len(values) == 1:
        return f"{mean:{sign}.{digits}f}"
    return f"{mean:{sign}.{digits}f} +/- {statistics.stdev(values):.{digits}f}"


def _resolved(diffs: list[float]) -> str:
    """Whether the seeds resolve a paired difference: the 95% t-interval of its mean excludes 0."""
    if len(diffs) < 2:
        return "-"
    from scipy.stats import t

    sem = statistics.stdev(diffs) / math.sqrt(len(diffs))
    if sem == 0:
        return "yes" if statistics.mean(diffs) != 0 else "no"
    half = t.ppf(0.975, len(diffs) - 1) * sem
    return "yes" if abs(statistics.mean(diffs)) > half else "no"


def table(rows: list[dict]) -> str:
    """The summary: per arm, level and variant the mean +/- std over seeds, then the paired
    differences with softmax (same level, seed and data)."""
    for row in rows:
        for key in COLUMNS[5:-3]:
            if key not in ("alpha_spatial", "alpha_temporal"):
                row[key] = _number(row.get(key))
        row["seed"] = int(row["seed"])
    levels = [level for level in LEVELS if any(r["level"] == level for r in rows)]
    lines = []
    main = [r for r in rows if r["arm"] == "main"]
    if main:
        lines += [
            "Arm 1, from scratch; mean +/- std over seeds. top-1: test top-1 (%; the same as mean per-class "
            "accuracy on this balanced split); - softmax: paired difference (same level, seed, videos; points); "
            "RMS calib.: RMS calibration error (%); mass on distractors: % of the cls token's patch attention "
            "(positive / negative map); negative off, distractors removed: top-1 change (points).",
            "",
            "| level | variant | seeds | top-1 | - softmax | resolved | RMS calib. | mass on distractors "
            "| negative off | distractors removed |",
            "|---|---|---:|---:|---:|---|---:|---:|---:|---:|",
        ]
        for level in levels:
            softmax = {r["seed"]: r for r in main if r["level"] == level and r["variant"] == "softmax"}
            for variant in VARIANTS:
                group = [r for r in main if r["level"] == level and r["variant"] == variant]
                if not group:
                    continue
                diffs = [r["top1"] - softmax[r["seed"]]["top1"] for r in group if r["seed"] in softmax]
                paired = ("-", "-") if variant == "softmax" or not diffs else (_pm(diffs, signed=True), _resolved(diffs))
                neg = [r["mass_negative_distractors"] for r in group]
                mass = _pm([r["mass_positive_distractors"] for r in group])
                if any(v is not None for v in neg):
                    mass += f" / {_pm(neg)}"
                lines.append(
                    f"| {level} | {variant} | {len(group)} | {_pm([r['top1'] for r in group])} | {paired[0]} "
                    f"| {paired[1]} | {_pm([r['rms_calibration_error'] for r in group])} "
                    f"| {mass if level != 'none' else '-'} | {_pm([r['delta_negative_off'] for r in group], signed=True)} "
                    f"| {_pm([r['delta_clean'] for r in group], signed=True) if level != 'none' else '-'} |"
                )
    tuned = [r for r in rows if r["arm"] == "finetune"]
    if tuned:
        lines += ["", "Arm 2, fine-tuned from the softmax model trained without distractors: test top-1 (%); "
                  "- softmax: paired difference with softmax fine-tuning (same start, seed, videos; points).", "",
                  "| level | fine-tuned as | seeds | top-1 | - softmax | resolved |",
                  "|---|---|---:|---:|---:|---|"]
        for level in levels:
            softmax = {r["seed"]: r for r in tuned if r["level"] == level and r["variant"] == "softmax"}
            kinds = [("softmax", "-")] + [("dna", init) for init in DNA_INITS]
            for variant, init in kinds:
                group = [r for r in tuned if r["level"] == level and r["variant"] == variant and r["dna_init"] == init]
                if not group:
                    continue
                label = "softmax" if variant == "softmax" else f"dna ({init})"
                diffs = [r["top1"] - softmax[r["seed"]]["top1"] for r in group if r["seed"] in softmax]
                diff_text, resolved = ("-", "-") if variant == "softmax" else (_pm(diffs, signed=True), _resolved(diffs))
                lines.append(f"| {level} | {label} | {len(group)} | {_pm([r['top1'] for r in group])} "
                             f"| {diff_text} | {resolved} |")
    return "\n".join(lines)


def accuracy_figure(rows: list[dict]) -> Figure:
    """Arm ``main``: test top-1 against the distractor level, one line per variant (mean and
    std over seeds)."""
    from matplotlib.figure import Figure

    table(rows)  # numbers parsed in place
    main = [r for r in rows if r["arm"] == "main"]
    levels = [level for level in LEVELS if any(r["level"] == level for r in main)]
    fig = Figure(figsize=(5.8, 4.0), layout="constrained")
    ax = fig.add_subplot()
    for i, variant in enumerate(VARIANTS):
        means, stds, xs = [], [], []
        for x, level in enumerate(levels):
            values = [100 * r["top1"] for r in main if r["level"] == level and r["variant"] == variant]
            if values:
                xs.append(x + (i - 2) * 0.06)  # side by side, so the error bars stay apart
                means.append(statistics.mean(values))
                stds.append(statistics.stdev(values) if len(values) > 1 else 0.0)
        if xs:
            ax.errorbar(xs, means, yerr=stds, marker="o", capsize=3, label=variant)
    ax.set_xticks(range(len(levels)), levels)
    ax.set_xlabel("distractor level")
    ax.set_ylabel("test top-1 (%)")
    ax.set_title("Test top-1 by distractor level\n(from scratch; mean and std over seeds)", fontsize=10)
    ax.legend(title="attention", fontsize=8, title_fontsize=8)
    ax.grid(alpha=0.3)
    return fig


def mass_figure(rows: list[dict]) -> Figure:
    """Arm ``main``, one panel per level with distractors: the share of the cls token's
    spatial attention on the distractors per variant and branch (mean and std over seeds),
    against the distractors' share of the patches (what uniform attention gives)."""
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    from dna_video.models.attention import attention_kind

    table(rows)  # numbers parsed in place
    main = [r for r in rows if r["arm"] == "main"]
    levels = [level for level in LEVELS if any(r["level"] == level for r in main)]
    harder = [level for level in levels if level != "none"] or ["none"]
    variants = [v for v in VARIANTS if any(r["variant"] == v for r in main)]
    colours = {"positive": "tab:blue", "negative": "tab:red"}
    fig = Figure(figsize=(3.6 * len(harder) + 1.4, 0.55 * len(variants) + 2.0), layout="constrained")
    axes = fig.subplots(1, len(harder), sharey=True, squeeze=False)[0]
    for ax, level in zip(axes, harder):
        for y, variant in enumerate(variants):
            group = [r for r in main if r["level"] == level and r["variant"] == variant]
            bars = {}
            for branch in colours:
                key = f"mass_{branch}_distractors"
                vals = [100 * r[key] for r in group if r[key] is not None]
                if vals:
                    bars[branch] = (statistics.mean(vals), statistics.stdev(vals) if len(vals) > 1 else 0.0)
            offsets = {"positive": -0.2, "negative": 0.2} if len(bars) == 2 else {branch: 0.0 for branch in bars}
            for branch, (mean, std) in bars.items():
                ax.barh(y + offsets[branch], mean, height=0.38, xerr=std, color=colours[branch], capsize=2)
        area = [100 * r["area_distractors"] for r in main if r["level"] == level and r["area_distractors"] is not None]
        if area:
            ax.axvline(statistics.mean(area), color="k", ls="--", lw=1)
        ax.set_title(f"level: {level}", fontsize=9)
        ax.set_xlabel("cls attention on distractors (%)")
        ax.grid(axis="x", alpha=0.3)
    # A one-map kind whose map is signed (cog) is measured by its absolute weights.
    signed = {v for v in variants if "attn" in attention_kind(v).signed_maps}
    axes[0].set_yticks(range(len(variants)), [f"{v} (|weights|)" if v in signed else v for v in variants])
    axes[0].invert_yaxis()  # the variants top to bottom in their order
    axes[0].set_ylabel("attention")
    handles = [
        Patch(color=colours["positive"], label="positive branch (one-map kinds: their map)"),
        Patch(color=colours["negative"], label="negative branch"),
        Line2D([], [], color="k", ls="--", lw=1, label="distractors' share of the patches (uniform attention)"),
    ]
    fig.legend(handles=handles, loc="outside lower center", ncols=1 if len(harder) < 2 else 2, fontsize=8)
    fig.suptitle("Share of the cls token's spatial attention on the distractors\n"
                 "(from scratch; mean over blocks, heads and test videos; mean and std over seeds)", fontsize=10)
    return fig


def plots(rows: list[dict], folder: Path) -> list[Path]:
    """accuracy vs level per variant; attention mass on the distractors per branch; each PNG
    written whole or not at all."""
    from dna_video.common.atomic import atomic_path

    written = []
    for name, make in (("denoising_accuracy.png", accuracy_figure), ("denoising_mass.png", mass_figure)):
        fig = make(rows)
        with atomic_path(folder / name) as partial:
            fig.savefig(partial, dpi=110, bbox_inches="tight")
        written.append(folder / name)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.denoising", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="runs/denoising", help="where the data and the runs go")
    parser.add_argument("--csv", default=None,
                        help=f"the results CSV (default {RESULTS.relative_to(REPO)}/denoising.csv; --quick: <out>/denoising.csv)")
    parser.add_argument("--arms", nargs="+", default=["main", "finetune"], choices=["main", "finetune"])
    parser.add_argument("--jobs", type=int, default=1, help="runs at a time (each gets cores / jobs threads)")
    parser.add_argument("--quick", action="store_true", help="a tiny grid (2 variants, 2 levels, 1 seed, 1 epoch)")
    parser.add_argument("--dry-run", action="store_true", help="print the plan and stop")
    parser.add_argument("--table", action="store_true", help="print the summary table from the CSV and stop")
    parser.add_argument("--plots", action="store_true", help="draw the plots from the CSV and stop")
    parser.add_argument("cli_args", nargs=argparse.REMAINDER, help="after --: more cli.py options for every run")
    args = parser.parse_args(argv)
    out = Path(args.out).resolve()
    csv_path = Path(args.csv) if args.csv else (out / "denoising.csv" if args.quick else RESULTS / "denoising.csv")
    if args.table or args.plots:
        try:
            rows = read_csv(csv_path)
        except FileNotFoundError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        if args.table:
            print(table(rows))
        else:
            for path in plots(rows, csv_path.parent):
                print(f"written: {path}")
        return 0

    cells = plan(args.arms, args.quick)
    extra = [a for a in args.cli_args if a != "--"]
    todo = [c for c in cells if not c.done(out)]
    print(f"{len(cells)} runs, {len(cells) - len(todo)} finished; runs and data under {out}")
    if args.dry_run:
        for cell in cells:
            state = "finished" if cell.done(out) else "to run"
            print(f"  [{state}] {cell.arm} {cell.level} {cell.name}")
        return 0

    # Every level's data before any run, so parallel runs never write the same folder.
    from dna_video.data.distractors import generate_distractor_dataset

    import yaml

    data_options = yaml.safe_load(CONFIG.read_text())["data"]["init_args"] | (QUICK["data"] if args.quick else {})
    scene = {k: v for k, v in data_options.items() if k in SCENE_OPTIONS}
    for level in dict.fromkeys(c.level for c in cells) | {"none": None}:
        generate_distractor_dataset(data_root(out, level, args.quick), **LEVELS[level], **scene)

    threads = max(1, (os.cpu_count() or 1) // max(args.jobs, 1))
    failures: list[str] = []
    started = time.time()

    def work(cell: Cell) -> None:
        if cell.start is not None and not cell.start.done(out):
            failures.append(f"{cell.arm} {cell.level} {cell.name}: its starting run {cell.start.name} did not finish")
            return
        error = run_cell(cell, out, args.quick, extra, threads)
        if error:
            failures.append(f"{cell.arm} {cell.level} {cell.name}: {error}")
        print(f"[{time.time() - started:7.0f} s] {cell.arm} {cell.level} {cell.name}: {error or 'done'}", flush=True)
        write_csv(collect(cells, out), csv_path)

    # Starting points first (the fine-tuning runs need them), then the rest.
    first = [c for c in todo if c.arm == "main"]
    second = [c for c in todo if c.arm == "finetune"]
    with ThreadPoolExecutor(max(args.jobs, 1)) as pool:
        list(pool.map(work, first))
    with ThreadPoolExecutor(max(args.jobs, 1)) as pool:
        list(pool.map(work, second))
    rows = collect(cells, out)
    write_csv(rows, csv_path)
    print(f"\n{len(rows)} of {len(cells)} runs in {csv_path} ({time.time() - started:.0f} s this time)\n")
    print(table(read_csv(csv_path)))
    for path in plots(read_csv(csv_path), csv_path.parent):
        print(f"written: {path}")
    if failures:
        print("\n".join(["failed:"] + failures), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
