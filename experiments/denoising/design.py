"""The design of the denoising experiment, stated once: its data, its runs (cells) and the
comparisons its report makes. The preregistered part (the primary comparison, its test, alpha,
power and number of pairs) lives in ``experiments/denoising_plan.yaml`` and is read from there.

Every run has a *pair seed* s: its ``--seed_everything``, its model's ``init.pair_seed`` (every
parameter it shares with softmax attention starts equal to the softmax model's at s, its extra
parameters come from their own generator) and its data's ``data_seed`` (training order and
augmentation drawn from their own generator, independent of the model). Two runs with the same
s differ only in what their cells say.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

__all__ = ["REPO", "CONFIG", "PLAN", "RESULTS", "Cell", "Comparison", "load_plan", "cells", "confirmatory_cells",
           "comparisons", "confusion_comparisons", "CONFUSION", "data_options", "test_set_options", "TEST_SETS",
           "QUICK"]

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "configs" / "denoising.yaml"
PLAN = REPO / "experiments" / "denoising_plan.yaml"
RESULTS = REPO / "experiments" / "results"

#: The held-out test sets (their videos come from seeds the training root never uses): the
#: training distribution, and the shift where every distractor's motion points to a wrong label.
TEST_SETS = ("in_distribution", "shifted")

#: The tiny grid of ``--quick`` (a test runs it): small videos, one epoch, few runs.
QUICK = dict(
    data=dict(videos_per_subject_class=1, height=32, width=40, crop_size=32, train_short_side=[32, 36], batch_size=4,
              num_frames=4),
    test_videos=10, map_videos=5, epochs=1, pairs=2, seeds=1, pretrain_seeds=1,
)


def load_plan(path: Path = PLAN) -> dict:
    """The committed plan (``experiments/denoising_plan.yaml``)."""
    if not path.is_file():
        raise FileNotFoundError(f"{path}: the experiment's plan is missing")
    return yaml.safe_load(path.read_text())


@dataclass(frozen=True)
class Cell:
    """One run: ``group`` (what it is part of), the attention ``variant`` it trains, its pair
    ``seed``, the cell whose final checkpoint it starts from (None: from scratch), the
    ``dna_init`` of the negative branch when it starts from a softmax model, and the ``task``
    (``target``: the cue regime; ``source``: the pretraining task, disjoint classes)."""

    group: str
    variant: str
    seed: int
    start: "Cell | None" = None
    dna_init: str = "-"
    task: str = "target"

    @property
    def label(self) -> str:
        return self.variant + ("" if self.dna_init == "-" else f"_{self.dna_init}")

    @property
    def name(self) -> str:
        """``group/label/seed<s>``: the cell on the command line (``--only``) and its folder."""
        return f"{self.group}/{self.label}/seed{self.seed}"

    def folder(self, runs: Path) -> Path:
        """The Lightning run folder (``config.yaml``, ``checkpoints/``, ``summary.json``)."""
        return runs / self.group / self.label / f"seed{self.seed}" / "version_0"

    def done(self, runs: Path) -> bool:
        return (self.folder(runs) / "cell.json").is_file()


@dataclass(frozen=True)
class Comparison:
    """``a - b`` over the seeds both have; ``primary``: the preregistered comparison of shifted
    top-1; ``confirmatory``: the preregistered question on distractor confusion (the plan's
    ``confirmatory``); the others are exploratory."""

    name: str
    a: tuple[str, str]  # (group, label)
    b: tuple[str, str]
    metric: str
    primary: bool = False
    threshold: float | None = None  # a bar the difference must clear (pretraining that pays)
    confirmatory: bool = False

    @property
    def preregistered(self) -> bool:
        return self.primary or self.confirmatory


def _pretrain(variant: str, seed: int) -> Cell:
    return Cell("pretrain", variant, seed, task="source")


def cells(plan: dict, quick: bool = False, calibration: bool = False) -> list[Cell]:
    """Every run of the grid in the order it runs, a run's start before it: the softmax
    pretraining, pilot, primary (only once the plan states its number of pairs), then the
    exploratory runs."""
    primary = plan["primary"]
    pilot = plan["pilot"]
    explore = plan["exploratory"]
    init = primary["dna_init"]
    seeds = range(QUICK["seeds"] if quick else explore["seeds"])
    pretrain_seeds = range(QUICK["pretrain_seeds"] if quick else explore["dna_pretrain_seeds"])
    start = _pretrain("softmax", 0)
    out = [start]
    if calibration:
        spec = plan["calibration"]
        return [start] + [Cell(f"calibrate{i}", "softmax", spec["run_seed"], start, task=f"calibrate{i}")
                          for i in range(len(spec["candidates"]))]
    # --quick leaves the pilot out: it is the primary's code path with other seeds.
    pilot_seeds = range(0) if quick else range(pilot["first_seed"], pilot["first_seed"] + pilot["pairs"])
    for s in pilot_seeds:
        out += [Cell("pilot", "softmax", s, start), Cell("pilot", "dna", s, start, init)]
    pairs = QUICK["pairs"] if quick else primary.get("pairs")
    if pairs:
        for s in range(pairs):
            out += [Cell("primary", "softmax", s, start), Cell("primary", "dna", s, start, init)]
        if not quick:  # --quick leaves these out: the primary's DnA path with another option
            others = [other for other in explore["dna_inits"] if other != init]
            out += [Cell("finetune_init", "dna", s, start, other) for s in seeds for other in others]
    out += [_pretrain("dna", s) for s in pretrain_seeds]
    if pairs:
        out += [Cell("dna_pretrained", "dna", s, _pretrain("dna", s % len(pretrain_seeds))) for s in seeds]
    if not quick:  # --quick leaves these out: the pretraining cells' path (no start) on the target task
        out += [Cell("scratch", variant, s) for s in seeds for variant in explore["scratch_variants"]]
        out += confirmatory_cells(plan)
    return out


def confirmatory_cells(plan: dict) -> list[Cell]:
    """The confirmatory question's runs (group ``confirm``, from scratch, seeds of their own):
    none until the plan states its number of pairs."""
    spec = plan.get("confirmatory") or {}
    if not spec.get("pairs"):
        return []
    first = int(spec["first_seed"])
    return [Cell("confirm", variant, s) for s in range(first, first + int(spec["pairs"]))
            for variant in ("softmax", spec["variant"])]


def comparisons(plan: dict) -> list[Comparison]:
    """What the report compares: the primary comparison first, then the exploratory ones."""
    init = plan["primary"]["dna_init"]
    metric = plan["primary"]["metric"]
    explore = plan["exploratory"]
    out = [
        Comparison(f"fine-tuned: DnA ({init}) - softmax", ("primary", f"dna_{init}"), ("primary", "softmax"), metric,
                   primary=True),
        Comparison(f"pilot: DnA ({init}) - softmax", ("pilot", f"dna_{init}"), ("pilot", "softmax"), metric),
    ]
    out += [Comparison(f"fine-tuned: DnA ({other}) - softmax", ("finetune_init", f"dna_{other}"),
                       ("primary", "softmax"), metric) for other in explore["dna_inits"] if other != init]
    out.append(Comparison("DnA-pretrained DnA - softmax-pretrained softmax", ("dna_pretrained", "dna"),
                          ("primary", "softmax"), metric))
    out.append(Comparison(f"DnA-pretrained DnA - softmax-pretrained DnA ({init})", ("dna_pretrained", "dna"),
                          ("primary", f"dna_{init}"), metric))
    for variant in explore["scratch_variants"]:
        if variant != "softmax":
            out.append(Comparison(f"from scratch: {variant} - softmax", ("scratch", variant), ("scratch", "softmax"),
                                  metric))
    out.append(Comparison("pretraining pays: fine-tuned softmax - from-scratch softmax", ("primary", "softmax"),
                          ("scratch", "softmax"), "in_distribution_top1", threshold=plan["pretraining"]["must_gain"]))
    return out


#: The confusion comparisons' metrics: the share of a set's videos predicted as the distractor's class.
CONFUSION = "shifted_distractor_confusion"


def confusion_comparisons(plan: dict) -> list[Comparison]:
    """What the report compares on distractor confusion: the confirmatory question first (once
    the plan has it), then the grid's arms on the same measure (exploratory: chosen after the
    grid showed where the predictions go)."""
    init = plan["primary"]["dna_init"]
    explore = plan["exploratory"]
    out = []
    spec = plan.get("confirmatory")
    if spec:
        out.append(Comparison(f"confirmatory, from scratch: {spec['variant']} - softmax", ("confirm", spec["variant"]),
                              ("confirm", "softmax"), spec["metric"], confirmatory=True))
    for variant in explore["scratch_variants"]:
        if variant != "softmax":
            out.append(Comparison(f"from scratch: {variant} - softmax", ("scratch", variant), ("scratch", "softmax"),
                                  CONFUSION))
    out.append(Comparison("from scratch: dna - softmax (in-distribution set)", ("scratch", "dna"), ("scratch", "softmax"),
                          "in_distribution_distractor_confusion"))
    out.append(Comparison(f"fine-tuned: DnA ({init}) - softmax", ("primary", f"dna_{init}"), ("primary", "softmax"),
                          CONFUSION))
    out += [Comparison(f"fine-tuned: DnA ({other}) - softmax", ("finetune_init", f"dna_{other}"),
                       ("primary", "softmax"), CONFUSION) for other in explore["dna_inits"] if other != init]
    out.append(Comparison("DnA-pretrained DnA - softmax-pretrained softmax", ("dna_pretrained", "dna"),
                          ("primary", "softmax"), CONFUSION))
    return out


def data_options(plan: dict, task: str, quick: bool) -> dict:
    """SyntheticDistractors options of the training root of ``task`` (beyond the config's):
    ``target``, ``source``, or ``calibrate<i>`` (the target's with calibration candidate i and
    the calibration's data seed)."""
    if task.startswith("calibrate"):
        spec = plan["calibration"]
        options = data_options(plan, "target", quick) | dict(spec["candidates"][int(task.removeprefix("calibrate"))])
        return options | {"seed": spec["seed"]}
    options = dict(plan["data"]["common"]) | dict(plan["data"][task])
    if quick:
        options |= {k: v for k, v in QUICK["data"].items() if k in ("videos_per_subject_class", "height", "width")}
    return options


def test_set_options(plan: dict, name: str, quick: bool) -> dict:
    """SyntheticDistractors options of a held-out test set (``in_distribution``, ``shifted`` or
    ``calibrate<i>``: candidate i's cue-conflicting calibration set): the target's, with the
    set's own cue rate and size."""
    if name.startswith("calibrate"):
        spec = plan["calibration"]
        options = data_options(plan, name, quick) | {"test_cue_rate": 0.0, "test_videos": spec["test_videos"]}
        return options | ({"test_videos": QUICK["test_videos"]} if quick else {})
    spec = dict(plan["test_sets"][name])
    options = data_options(plan, "target", quick) | spec
    if quick:
        options["test_videos"] = QUICK["test_videos"]
    return options
