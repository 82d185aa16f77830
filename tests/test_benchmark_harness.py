"""The benchmark suite's measuring tools: peak tensor memory and interleaved timing."""

import torch

from benchmarks.harness import Row, interleaved, markdown_table, peak_memory


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
