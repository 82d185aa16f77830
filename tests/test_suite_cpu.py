"""benchmarks/suite_cpu.py, the plugin that records each test's CPU: its hooks called as pytest
calls them, around a test that burns CPU in this process and in a child it waits for, and one
that sleeps; the report ranks them by CPU."""

import json
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest

from benchmarks import suite_cpu


def _burn(seconds: float) -> None:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def test_records_own_and_child_cpu_and_the_report_ranks_by_cpu(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(suite_cpu, "_FOLDER", tmp_path)
    monkeypatch.setattr(suite_cpu, "_log", None)
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    (tmp_path / "gw7.jsonl").write_text("stale\n")  # an earlier run's worker: removed
    suite_cpu.pytest_configure(SimpleNamespace(option=SimpleNamespace(dist="no")))
    suite_cpu.pytest_collection_finish(None)

    suite_cpu.pytest_runtest_logstart("t.py::burns", None)
    _burn(0.3)
    subprocess.run([sys.executable, "-c", "import time\nend = time.process_time() + 0.4\n"
                    "while time.process_time() < end: pass"], check=True)
    suite_cpu.pytest_runtest_logfinish("t.py::burns", None)
    suite_cpu.pytest_runtest_logstart("u.py::sleeps", None)
    time.sleep(0.3)
    suite_cpu.pytest_runtest_logfinish("u.py::sleeps", None)
    suite_cpu.pytest_unconfigure(None)

    assert sorted(p.name for p in tmp_path.iterdir()) == ["main.jsonl"]
    records = {r["id"]: r for r in map(json.loads, (tmp_path / "main.jsonl").read_text().splitlines())
               if r["event"] == "test"}
    burns, sleeps = records["t.py::burns"], records["u.py::sleeps"]
    assert burns["own"] == pytest.approx(0.3, abs=0.1) and burns["children"] == pytest.approx(0.4, abs=0.15)
    assert sleeps["own"] + sleeps["children"] < 0.1 and sleeps["wall"] >= 0.3

    assert suite_cpu.main([str(tmp_path), "--top", "2"]) == 0
    out = capsys.readouterr().out
    assert out.index("t.py::burns") < out.index("u.py::sleeps")  # most CPU first
    assert "2 tests," in out and out.splitlines()[0].startswith("main: collection")


def test_the_xdist_controller_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(suite_cpu, "_FOLDER", tmp_path)
    monkeypatch.setattr(suite_cpu, "_log", None)
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    suite_cpu.pytest_configure(SimpleNamespace(option=SimpleNamespace(dist="load")))
    suite_cpu.pytest_runtest_logstart("t.py::relayed", None)  # a worker's report, heard here
    suite_cpu.pytest_runtest_logfinish("t.py::relayed", None)
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(SystemExit):
        suite_cpu.main([str(tmp_path)])  # no records: says so
