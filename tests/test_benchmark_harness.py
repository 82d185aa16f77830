"""The benchmark suite's measuring tools: peak tensor memory and interleaved timing."""

from types import SimpleNamespace

import torch

from benchmarks import harness
from benchmarks.harness import Row, Timing, interleaved, markdown_table, peak_memory, rate_row, time_row


def test_peak_memory_replays_allocations_and_frees():
    kept = torch.empty(1_000_000)  # live before: not counted

    def work():
        a = torch.empty(1_000_000)  # 4 MB
        b = torch.empty(500_000)  # 2 MB: 6 MB live, the peak
        del a
        c = torch.empty(250_000)  # 3 MB live
        return b, c

    assert peak_memory(work) == 6_000_000
    assert kept.numel() == 1_000_000


def test_interleaved_rotates_the_order_and_reports_medians():
    order = []
    cases = {name: (lambda name=name: order.append(name)) for name in "abc"}
    timings = interleaved(cases, rounds=3, warmup=1)
    assert order == ["a", "b", "c", "a", "b", "c", "b", "c", "a", "c", "a", "b"]
    assert set(timings) == {"a", "b", "c"} and all(t.wall >= 0 and t.cpu >= 0 for t in timings.values())


def test_table_marks_targets():
    rows = [Row("s", "c", "ms", "ours", 1.5, "base", 1.0, "<= 1.6", True),
            Row("s", "c", "clips/s", "ours", 3.0, "base", 1.0, ">= 2", False)]
    table = markdown_table(rows).splitlines()
    assert "| 1.50 |" in table[2] and "(met)" in table[2]
    assert "| 3.00 |" in table[3] and "(MISSED)" in table[3]


class FakeClock:
    """Wall and CPU clocks that advance only when a case says how long it took."""

    def __init__(self):
        self.wall = self.cpu = 0.0

    def case(self, wall_seconds, cpu_share=0.5):
        """A case whose calls take the given seconds in turn (CPU time: ``cpu_share`` of them)."""
        durations = iter(wall_seconds)

        def call():
            took = next(durations)
            self.wall += took
            self.cpu += cpu_share * took

        return call


def test_interleaved_reports_the_median_of_the_timed_rounds_without_the_warmup(monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(harness, "time", SimpleNamespace(perf_counter=lambda: clock.wall,
                                                         process_time=lambda: clock.cpu))
    # Warm-up call first (100 s, not timed), then 3 rounds; medians 3 and 2, minima 1 and 2,
    # means 13/3 and 4.
    cases = {"a": clock.case([100, 1, 9, 3]), "b": clock.case([50, 2, 2, 8], cpu_share=0.25)}
    timings = interleaved(cases, rounds=3, warmup=1)
    assert timings == {"a": Timing(wall=3, cpu=1.5), "b": Timing(wall=2, cpu=0.5)}


def test_rate_and_time_rows_compute_ratios_and_check_the_target_direction():
    ours, baseline = Timing(wall=0.5, cpu=0.4), Timing(wall=1.0, cpu=1.0)  # ours twice as fast
    row = rate_row("s", "c", 8, "ours", ours, "base", baseline, ">= 1.5x", limit=1.5)
    assert (row.ours_value, row.baseline_value, row.ratio, row.cpu_ratio) == (16.0, 8.0, 2.0, 2.5)
    assert row.met is True
    assert rate_row("s", "c", 8, "ours", ours, "base", baseline, limit=2.5).met is False
    assert rate_row("s", "c", 8, "ours", baseline, "base", ours, limit=1.0).met is False  # slower: missed
    assert rate_row("s", "c", 8, "ours", ours, "base", baseline).met is None  # no target
    row = time_row("s", "c", "ms", "ours", ours, "base", baseline, "<= 0.6x", limit=0.6)
    assert (row.ours_value, row.baseline_value, row.ratio, row.cpu_ratio) == (500.0, 1000.0, 0.5, 0.4)
    assert row.met is True
    assert time_row("s", "c", "ms", "ours", ours, "base", baseline, limit=0.4).met is False
    assert time_row("s", "c", "ms", "ours", baseline, "base", ours, limit=1.0).met is False  # slower: missed


def test_the_attention_profile_puts_each_op_in_its_bucket_and_adds_up():
    from benchmarks.profile_attention import bucket_of, profile_buckets
    from dna_video.models.attention import DenoisingAttention, SoftmaxAttention

    assert [bucket_of(op) for op in ("aten::addmm", "aten::mm")] == ["projections"] * 2
    assert [bucket_of(op) for op in ("aten::_scaled_dot_product_flash_attention_for_cpu",
                                     "aten::_scaled_dot_product_flash_attention_for_cpu_backward",
                                     "aten::bmm", "aten::_softmax")] == ["attention"] * 4
    assert [bucket_of(op) for op in ("aten::neg", "aten::mul", "aten::add_", "aten::cat")] == ["elementwise"] * 4
    # A wrapper's self time is bookkeeping, not the kernel it calls (that one is counted on its own).
    assert [bucket_of(op) for op in ("aten::scaled_dot_product_attention", "aten::linear",
                                     "autograd::engine::evaluate_function: AddmmBackward0")] == ["elementwise"] * 3
    torch.manual_seed(0)
    x, grad = torch.randn(2, 20, 32, requires_grad=True), torch.randn(2, 20, 32)
    dna_total, dna = profile_buckets(DenoisingAttention(32, 2), x, grad, steps=1)
    mhsa_total, mhsa = profile_buckets(SoftmaxAttention(32, 2), x, grad, steps=1)
    assert dna_total == sum(dna.values()) > 0 and mhsa_total == sum(mhsa.values()) > 0
    # DnA's three projections and two attention branches are there, beside softmax's one and one.
    assert dna["projections"] > 0 and dna["attention"] > 0 and mhsa["attention"] > 0


def test_the_header_names_the_measured_commit():
    import subprocess
    from pathlib import Path

    from benchmarks.harness import code_description

    repo = Path(__file__).resolve().parents[1]
    head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True)
    if head.returncode != 0:
        assert code_description().startswith("commit unknown")
        return
    dirty = subprocess.run(["git", "-C", str(repo), "status", "--porcelain"], capture_output=True, text=True).stdout.strip()
    assert code_description().startswith(f"commit {head.stdout.strip()[:12]} (")
    assert ("uncommitted changes" in code_description()) == bool(dirty)
