"""Reproduce a row of the paper's tables: softmax vs DnA TimeSformer, same start, same recipe, N seeds.

    python -m experiments.paper --dataset toyota_smarthome --protocol cs --root /data/Smarthome/mp4 \\
        --init-from /weights/timesformer_k400.pyth --seeds 3
    python -m experiments.paper --dataset ntu60 --protocol cv --root /data/ntu60_256 \\
        --init-from facebook/timesformer-base-finetuned-k400 --seeds 3 --devices 4 --strategy ddp
    python -m experiments.paper ... --dry-run          # print the plan only
    python -m experiments.paper --dataset ntu60 --protocol cs --estimate   # compute a row needs
    python -m experiments.paper ... -- --trainer.precision bf16-mixed   # more CLI options for every run

Each run is ``cli.py fit`` with the experiment's config (``configs/<dataset>_<protocol>.yaml``,
the paper's recipe) and the best checkpoint tested at the end, in a process of its own (so a
multi-GPU strategy launches as Lightning expects). Runs live in
``<out>/<dataset>_<protocol>/<attention>_seed<N>/version_0/``. Resumable: a run whose
``summary.json`` holds a test result is skipped; one with a ``last.ckpt`` continues from it.
The table (``results.md`` and ``results.csv`` beside the runs, and printed) gives per attention
the mean +/- std over seeds of mean per-class accuracy and top-1, the paired DnA - softmax
delta per seed with its spread, the paper's delta, training clips/s, peak GPU memory,
parameters, GFLOPs per view (fvcore's multiply-add convention, counted by torch) and views
per video, and where every run's checkpoint, config and logs are.
"""

from __future__ import annotations

import argparse
import csv
import shlex
import statistics
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

from dna_video.common.atomic import atomic_path, write_text
from dna_video.training.callbacks.run_summary import read_summary
from dna_video.checkpoints import timesformer_from_checkpoint
from dna_video.models.flops import view_cost

REPO = Path(__file__).resolve().parents[1]

# Config per (dataset, protocol), and the paper's DnA - softmax delta for it (percentage points
# of the main metric; dna.md: Smarthome CS +1.3, CV +4.0, NTU RGB+D 60 +1.2).
EXPERIMENTS: dict[tuple[str, str], tuple[str, float | None]] = {
    ("toyota_smarthome", "cs"): ("configs/toyota_cs.yaml", 1.3),
    ("toyota_smarthome", "cv1"): ("configs/toyota_cv1.yaml", None),  # the paper reports CV2 only
    ("toyota_smarthome", "cv2"): ("configs/toyota_cv2.yaml", 4.0),
    ("ntu60", "cs"): ("configs/ntu60_cs.yaml", 1.2),  # the paper gives one NTU RGB+D 60 figure
    ("ntu60", "cv"): ("configs/ntu60_cv.yaml", 1.2),
}
ATTENTIONS = ("softmax", "dna")


@dataclass
class Run:
    attention: str
    seed: int
    folder: Path  # the logger's version folder: config.yaml, checkpoints/, logs, summary.json
    command: list[str]

    @property
    def summary(self) -> dict:
        return read_summary(self.folder)

    @property
    def finished(self) -> bool:
        return bool(self.summary.get("test", {}).get("metrics"))


def plan(args: argparse.Namespace) -> list[Run]:
    config, _ = EXPERIMENTS[(args.dataset, args.protocol)]
    experiment = Path(args.out) / f"{args.dataset}_{args.protocol}"
    runs = []
    for attention in args.attentions:
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            name = f"{attention}_seed{seed}"
            folder = experiment / name / "version_0"
            command = [
                sys.executable, str(REPO / "cli.py"), "fit", "--config", str(REPO / config),
                "--data.init_args.root", args.root,
                "--model.network.attention", attention,
                "--seed_everything", str(seed),
                "--trainer.logger.init_args.save_dir", str(experiment),
                "--trainer.logger.init_args.name", name,
                "--trainer.logger.init_args.version", "0",
                "--test_after_fit", "true",
            ]
            if args.init_from:
                command += ["--model.init.source", args.init_from]
            if args.devices:
                command += ["--trainer.devices", args.devices]
            if args.strategy:
                command += ["--trainer.strategy", args.strategy]
            command += args.cli_args
            last = folder / "checkpoints" / "last.ckpt"
            if last.is_file() and not read_summary(folder).get("test"):
                command += ["--ckpt_path", str(last)]  # an interrupted run continues
            elif folder.is_dir() and not last.is_file():
                command += ["--overwrite", "true"]  # a run that died before its first checkpoint starts over
            runs.append(Run(attention, seed, folder, command))
    return runs


def _mean_std(values: list[float]) -> tuple[float, float | None]:
    return statistics.mean(values), statistics.stdev(values) if len(values) > 1 else None


def _pm(values: list[float], scale: float = 100.0) -> str:
    if not values:
        return "-"
    mean, std = _mean_std([v * scale for v in values])
    return f"{mean:.2f}" if std is None else f"{mean:.2f} +/- {std:.2f}"


def _views_per_video(folder: Path) -> int:
    data = yaml.safe_load((folder / "config.yaml").read_text())["data"]["init_args"]
    return int(data["test_num_clips"]) * int(data["test_num_crops"])


def _cost(checkpoint: str, views: int) -> dict[str, float]:
    model, _ = timesformer_from_checkpoint(checkpoint, load_kwargs={"log_report": False})
    cost = view_cost(model.to("meta"), model.num_frames, model.img_size)
    return {"params_m": cost.parameters / 1e6, "gflops_per_view": cost.gmacs, "views_per_video": views}


def table(runs: list[Run], paper_delta: float | None) -> tuple[str, list[dict]]:
    """The results table (markdown) and one CSV row per finished run."""
    rows = []
    for run in runs:
        summary = run.summary
        if not summary.get("test", {}).get("metrics"):
            continue
        metrics, fit = summary["test"]["metrics"], summary.get("fit", {})
        throughput = fit.get("throughput", {})
        rows.append({
            "attention": run.attention, "seed": run.seed,
            "mca": metrics.get("test/mca"), "top1": metrics.get("test/top1"),
            "train_clips_per_s": throughput.get("perf/epoch_train_clips_per_s",
                                                next(iter(throughput.values()), None)),
            "peak_gpu_memory_gb": fit.get("peak_gpu_memory_gb"),
            "checkpoint": summary["test"].get("checkpoint"),
            "config": str(run.folder / "config.yaml"), "logs": summary.get("log_dir", str(run.folder)),
        })
    lines = [
        "| attention | runs | mean per-class acc. (%) | top-1 (%) | train clips/s | peak GPU memory (GB) "
        "| params (M) | GFLOPs / view | views / video |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    by_attention: dict[str, list[dict]] = {}
    for row in rows:
        by_attention.setdefault(row["attention"], []).append(row)
    for attention, group in by_attention.items():
        cost = _cost(group[0]["checkpoint"], _views_per_video(Path(group[0]["config"]).parent))
        for row in group:
            row.update(cost)
        clips = [r["train_clips_per_s"] for r in group if r["train_clips_per_s"] is not None]
        memory = [r["peak_gpu_memory_gb"] for r in group if r["peak_gpu_memory_gb"] is not None]
        lines.append(
            f"| {attention} | {len(group)} | {_pm([r['mca'] for r in group])} | {_pm([r['top1'] for r in group])} "
            f"| {_pm(clips, 1.0)} | {_pm(memory, 1.0)} | {cost['params_m']:.2f} | {cost['gflops_per_view']:.1f} "
            f"| {cost['views_per_video']} |"
        )
    softmax = {r["seed"]: r for r in by_attention.get("softmax", [])}
    paired = [(r["mca"] - softmax[r["seed"]]["mca"], r["top1"] - softmax[r["seed"]]["top1"])
              for r in by_attention.get("dna", []) if r["seed"] in softmax]
    text = "\n".join(lines)
    if paired:
        paper = "not reported" if paper_delta is None else f"{paper_delta:+.1f}"
        text += (
            f"\n\nPaired DnA - softmax (same seed, same start, {len(paired)} seeds): mean per-class accuracy "
            f"{_pm([d for d, _ in paired])} points, top-1 {_pm([t for _, t in paired])} points; "
            f"the paper: {paper} (mean per-class accuracy)."
        )
    text += "\n\n| attention | seed | mca (%) | top-1 (%) | checkpoint | config | logs |\n|---|---:|---:|---:|---|---|---|\n"
    text += "\n".join(
        f"| {r['attention']} | {r['seed']} | {100 * r['mca']:.2f} | {100 * r['top1']:.2f} | {r['checkpoint']} "
        f"| {r['config']} | {r['logs']} |" for r in rows
    )
    return text, rows


def estimate(dataset: str, protocol_name: str, seeds: int, tflops: float, epochs: int = 15, views: int = 3,
             val_fraction: float = 0.05) -> str:
    """What one row costs with the paper's recipe on the full dataset: FLOPs counted by torch on
    TimeSformer-B (8 x 224 x 224), video counts from the split definitions, and the time at
    ``tflops`` sustained (training = 3 forward passes: forward, and backward's two products)."""
    from dna_video.data.ntu import ntu_protocol
    from dna_video.data.smarthome import smarthome_protocol
    from dna_video.models.timesformer import timesformer

    protocol = (smarthome_protocol if dataset == "toyota_smarthome" else ntu_protocol)(protocol_name)
    counts = dict(protocol.expected_videos)
    if "val" not in counts:  # NTU: validation held out of the training performances
        counts["val"] = round(val_fraction * counts["train"])
        counts["train"] -= counts["val"]
    lines = [
        f"{dataset} {protocol_name}: {counts['train']} train / {counts['val']} val / {counts['test']} test videos, "
        f"{epochs} epochs, {views} views per evaluated video, {len(protocol.classes)} classes",
        "",
        "| attention | GFLOPs / view | PFLOP per run (train + val + test) | hours per run at "
        f"{tflops:g} TFLOPS | hours for {seeds} seeds |",
        "|---|---:|---:|---:|---:|",
    ]
    for attention in ATTENTIONS:
        model = timesformer("base", num_classes=len(protocol.classes), num_frames=8, img_size=224, attention=attention)
        forward = view_cost(model.to("meta"), 8, 224).flops
        total = forward * (3 * epochs * counts["train"] + views * (epochs * counts["val"] + counts["test"]))
        hours = total / (tflops * 1e12) / 3600
        lines.append(f"| {attention} | {forward / 2e9:.0f} | {total / 1e15:,.0f} | {hours:.1f} | {seeds * hours:.1f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.paper", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", required=True, choices=sorted({d for d, _ in EXPERIMENTS}))
    parser.add_argument("--protocol", required=True, choices=sorted({p for _, p in EXPERIMENTS}))
    parser.add_argument("--root", help="the dataset's video folder")
    parser.add_argument("--init-from", default=None,
                        help="checkpoint both attentions start from (file, folder, Hub id or URL); the paper "
                             "fine-tunes from Kinetics-400")
    parser.add_argument("--seeds", type=int, default=3, help="seeds per attention")
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--attentions", nargs="+", default=list(ATTENTIONS))
    parser.add_argument("--out", default="runs/paper", help="where the runs and the table go")
    parser.add_argument("--devices", default=None, help="Lightning's trainer.devices for every run (e.g. 4)")
    parser.add_argument("--strategy", default=None, help="Lightning's trainer.strategy (e.g. ddp)")
    parser.add_argument("--dry-run", action="store_true", help="print the plan and stop")
    parser.add_argument("--estimate", action="store_true",
                        help="print the compute a row needs on the full dataset (FLOPs counted by torch) and stop")
    parser.add_argument("--tflops", type=float, default=100.0,
                        help="sustained TFLOPS assumed by --estimate (default 100: a data-centre GPU in bf16)")
    parser.add_argument("cli_args", nargs=argparse.REMAINDER,
                        help="after --: more cli.py options for every run")
    args = parser.parse_args(argv)
    if (args.dataset, args.protocol) not in EXPERIMENTS:
        parser.error(f"no {args.protocol!r} protocol for {args.dataset}: choose one of "
                     f"{sorted(p for d, p in EXPERIMENTS if d == args.dataset)}")
    args.cli_args = [a for a in args.cli_args if a != "--"]
    if args.estimate:
        print(estimate(args.dataset, args.protocol, args.seeds, args.tflops))
        return 0
    if not args.root:
        parser.error("--root: the dataset's video folder is required (a dry run prints the commands for it)")
    if not args.dry_run and not Path(args.root).is_dir():
        parser.error(f"--root {args.root}: no such folder")
    if not args.init_from:
        print("note: no --init-from: the models train from scratch, far below the paper's numbers")

    runs = plan(args)
    print(f"{len(runs)} runs ({', '.join(args.attentions)} x {args.seeds} seeds):")
    for run in runs:
        state = "finished, skipped" if run.finished else (
            "resumes from last.ckpt" if "--ckpt_path" in run.command else "to run")
        print(f"  [{state}] {shlex.join(run.command)}")
    if args.dry_run:
        return 0

    failed = []
    for run in runs:
        if run.finished:
            continue
        print(f"\n== {run.attention}, seed {run.seed}: {run.folder}", flush=True)
        if subprocess.run(run.command, cwd=REPO).returncode != 0 or not run.finished:
            failed.append(run)
            print(f"run failed: {run.folder} (its log above); the other runs go on", file=sys.stderr)

    _, paper_delta = EXPERIMENTS[(args.dataset, args.protocol)]
    text, rows = table(runs, paper_delta)
    experiment = Path(args.out) / f"{args.dataset}_{args.protocol}"
    write_text(experiment / "results.md", text + "\n")
    with atomic_path(experiment / "results.csv") as partial, open(partial, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["attention"])
        writer.writeheader()
        writer.writerows(rows)
    print("\n" + text + f"\n\nwritten: {experiment / 'results.md'}, {experiment / 'results.csv'}")
    if failed:
        print(f"{len(failed)} run(s) failed: {', '.join(str(r.folder) for r in failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
