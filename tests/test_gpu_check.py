"""The GPU check where there is no GPU (CI): the dry run of ``benchmarks/gpu_check.sh`` passes
with every gpu test skipped for its reason, the gpu tests' checking code runs on the CPU, and
the GPU benchmark's code runs at a tiny size on the CPU. So a GPU run finds working code."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import test_gpu
from test_gpu import KINDS, NO_CUDA, check_formula

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_dry_run_passes_with_the_gpu_tests_skipped_for_their_reason():
    env = {key: value for key, value in os.environ.items() if key != "OUT"}
    env["PYTHON"] = sys.executable
    result = subprocess.run(["bash", "benchmarks/gpu_check.sh", "--dry-run"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=300)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-4000:]
    # Every gpu test collected and skipped, none run, none failing, and the reason given.
    summary = re.search(r"=+ (.*) in [\d.]+s =+\s*$", result.stdout.split("== GPU benchmark rows")[0])
    assert summary and re.fullmatch(r"\d+ skipped", summary.group(1)), out[-4000:]
    assert int(summary.group(1).split()[0]) >= 2 * len(KINDS)
    assert "tests/test_gpu.py:" in out and NO_CUDA in out
    assert "imports: ok" in out  # tests/gpu_import_guard.py: no Lightning, decoder or jsonargparse
    assert "no CUDA device here, nothing measured" in out
    assert "tests exit 0, benchmark exit 0" in out


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("kind", KINDS)
def test_the_formula_check_runs_on_the_cpu(kind, dtype, monkeypatch):
    """The gpu tests' check, on the CPU's fused kernel (the no-grad forward) at shorter
    lengths: the references, the tolerances and the error bookkeeping work."""
    monkeypatch.setattr(test_gpu, "LENGTHS", (40, 8))
    check_formula(kind, torch.device("cpu"), dtype, "FLASH_ATTENTION")


def test_a_backend_without_a_kernel_is_a_skip():
    # The CPU has no memory-efficient kernel: what a GPU without one (or float32 flash) gives.
    with pytest.raises(pytest.skip.Exception, match="offers no kernel"):
        check_formula("softmax", torch.device("cpu"), "fp32", "EFFICIENT_ATTENTION")


def test_the_formula_check_catches_a_wrong_term(monkeypatch):
    """A DnA whose negative branch is subtracted instead of added fails the check."""
    kind = test_gpu.attention_kind("dna")
    monkeypatch.setattr(test_gpu, "LENGTHS", (40,))
    monkeypatch.setattr(kind.module, "alpha", lambda self: -self.neg_scalers)
    with pytest.raises(AssertionError, match="over 0.0001"):
        check_formula("dna", torch.device("cpu"), "fp32", "MATH")


@pytest.mark.slow
def test_the_compile_check_runs_on_the_cpu():
    """The gpu compile test's code, with dynamo's eager backend (tracing with fullgraph=True,
    no code generation): one kind, cog, the quickest to trace."""
    assert test_gpu.temporal_attention_matters("cog", torch.device("cpu")) > 1e-3
    errors = test_gpu.compiled_errors("cog", torch.device("cpu"), backend="eager")
    assert "output" in errors and "grad blocks.1.temporal_fc.weight" in errors
    assert all(error <= 1e-4 for error, _ in errors.values())


@pytest.mark.slow
def test_the_gpu_benchmark_runs_at_a_tiny_size_on_the_cpu():
    from benchmarks import gpu

    rows, notes = gpu.run(torch.device("cpu"), gpu.TINY, budget_s=300)
    metrics = {(row.case.split(",")[0], row.metric) for row in rows}
    assert {("train step", "ms"), ("train step", "clips/s"), ("train step", "peak MiB"),
            ("inference", "clips/s"), ("memory curve", "ms"), ("memory curve", "peak MiB"),
            ("memory curve", "total peak MiB")} <= metrics
    # Times measured; memory only on CUDA (NaN here: no "longest clip" notes either).
    assert all(row.ours_value > 0 and row.baseline_value > 0 for row in rows if "MiB" not in row.metric)
    curve = [row for row in rows if row.case.startswith("memory curve") and row.metric == "ms"]
    assert len(curve) == 2 * len(gpu.TINY.curve_frames)  # each T, float32 and bf16
    if gpu._hf_available():
        assert any(row.baseline == "HF softmax" for row in rows)
    assert not any(note.startswith("Longest clip") for note in notes)
    assert "| gpu | train step, bf16 autocast, D 64" in gpu.markdown_table(rows)


def test_a_baseline_that_fails_to_build_leaves_our_rows(monkeypatch):
    from benchmarks import gpu, model

    def broken(g):
        raise RuntimeError("no such config field")

    monkeypatch.setattr(model, "build_hf", broken)
    monkeypatch.setattr(gpu, "_hf_available", lambda: True)
    notes = []
    models = gpu._models(gpu.TINY, torch.device("cpu"), notes)
    assert set(models) == {"DnA", "softmax"}
    assert notes == ["Hugging Face rows skipped: building the model failed: RuntimeError('no such config field')"]


def test_longest_clip_follows_the_line_through_the_two_longest_clips():
    from benchmarks.gpu import TINY, _card_notes, longest_clip

    # 1000 MiB + 100 MiB per frame: 24 GiB holds (24576 - 1000) / 100 = 235 frames.
    assert longest_clip({8: 1800.0, 16: 2600.0, 32: 4200.0}, 24) == 235
    assert longest_clip({8: 1800.0}, 24) is None
    assert longest_clip({8: float("nan"), 16: float("nan")}, 24) is None
    notes = []
    _card_notes(TINY, {("fp32", True): {16: 2600.0, 32: 4200.0}}, notes)
    assert notes and "with grad checkpointing: about 235 frames in 24 GiB, about 809 frames in 80 GiB" in notes[0]
