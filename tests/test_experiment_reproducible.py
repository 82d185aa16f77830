"""The experiments' reproducibility pieces: the paired statistics against scipy and the
noncentral t, the tree state and worktrees on a throwaway git repository, the run's record."""

import math
import subprocess

import numpy as np
import pytest
from scipy import stats as scipy_stats

from experiments.denoising.stats import minimum_detectable_effect, paired, pairs_needed
from experiments.reproducible import (environment, require_clean, resolve_commit, single_thread_env, tree_state,
                                      worktree)


def test_paired_matches_scipy_and_the_written_out_interval():
    rng = np.random.default_rng(0)
    b = rng.normal(0.5, 0.1, 12)
    a = b + rng.normal(0.02, 0.03, 12)
    result = paired(list(a), list(b))
    reference = scipy_stats.ttest_rel(a, b)
    assert result.p == pytest.approx(reference.pvalue, rel=1e-9)
    diffs = a - b
    half = scipy_stats.t.ppf(0.975, 11) * diffs.std(ddof=1) / math.sqrt(12)
    assert (result.low, result.high) == pytest.approx((diffs.mean() - half, diffs.mean() + half), rel=1e-12)
    assert result.correlation == pytest.approx(np.corrcoef(a, b)[0, 1], rel=1e-9)
    assert result.n == 12 and result.resolved == (result.low > 0)


def test_minimum_detectable_effect_has_the_stated_power():
    # The power of the paired t-test at the MDE, from the noncentral t: about 80% (the formula
    # is the usual approximation; exact power is a little above it for small n).
    for n, sd in ((5, 0.04), (10, 0.03), (20, 0.1)):
        mde = minimum_detectable_effect(sd, n)
        df, crit = n - 1, scipy_stats.t.ppf(0.975, n - 1)
        shift = mde / (sd / math.sqrt(n))
        power = scipy_stats.nct.sf(crit, df, shift) + scipy_stats.nct.cdf(-crit, df, shift)
        assert 0.79 <= power <= 0.84, (n, power)
    assert pairs_needed(0.03, 0.03, at_least=10) == 10  # 10 pairs detect 3 points when sd is 3
    n = pairs_needed(0.06, 0.03, at_least=10)
    assert minimum_detectable_effect(0.06, n) <= 0.03 < minimum_detectable_effect(0.06, n - 1)
    assert pairs_needed(0.5, 0.03, at_most=20) is None


def _git(repo, *args):
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


@pytest.fixture
def repo(tmp_path):
    root = tmp_path / "repo"
    root.mkdir()
    _git(root, "init", "-q")
    _git(root, "config", "user.email", "t@t")
    _git(root, "config", "user.name", "t")
    (root / "code.py").write_text("x = 1\n")
    _git(root, "add", "code.py")
    _git(root, "commit", "-q", "-m", "one")
    return root


def test_a_dirty_tree_is_refused_naming_the_files(repo):
    state = require_clean(repo, False, "the runner")
    assert not state.dirty and len(state.commit) == 40 and state.label == state.commit
    (repo / "code.py").write_text("x = 2\n")
    (repo / "new.py").write_text("")
    with pytest.raises(SystemExit, match=r"uncommitted changes \(code.py, new.py\).*--allow-dirty"):
        require_clean(repo, False, "the runner")
    allowed = require_clean(repo, True, "the runner")
    assert allowed.dirty and allowed.label == state.commit + "+dirty"
    # The command's own result files do not count (they are rewritten until committed).
    (repo / "code.py").write_text("x = 1\n")
    (repo / "new.py").unlink()
    (repo / "results").mkdir()
    (repo / "results" / "table.csv").write_text("a\n")
    assert not require_clean(repo, False, "the runner", outputs=("results/table.csv",)).dirty
    with pytest.raises(SystemExit, match=r"\(results/table.csv\)"):
        require_clean(repo, False, "the runner", outputs=("results/other.csv",))


def test_worktree_checks_out_the_commit_once(repo, tmp_path):
    first = tree_state(repo).commit
    (repo / "code.py").write_text("x = 2\n")
    _git(repo, "commit", "-qam", "two")
    path = worktree(repo, first, tmp_path / "code")
    assert (path / "code.py").read_text() == "x = 1\n"  # the recorded commit, not HEAD
    assert tree_state(path).commit == first and not tree_state(path).dirty
    assert worktree(repo, first, tmp_path / "code") == path  # reused
    assert resolve_commit(repo, "HEAD~1") == first and resolve_commit(repo, first[:8]) == first


def test_the_run_record_and_environment(tmp_path):
    env = single_thread_env(tmp_path)
    assert env["OMP_NUM_THREADS"] == env["MKL_NUM_THREADS"] == "1"
    assert env["PYTHONPATH"].split(":")[0] == str(tmp_path)
    record = environment()
    assert record["versions"]["torch"].startswith("2.") and record["python"].count(".") == 2
    assert {"cpu", "torch_threads", "platform"} <= set(record)
    assert record["cpu_capability"] == __import__("torch").backends.cpu.get_cpu_capability()
