"""Shared fixtures: small real video datasets written once per test session."""

import os

import pytest

# Lightning's CLI prints jsonargparse deprecation warnings otherwise.
os.environ.setdefault("JSONARGPARSE_DEPRECATION_WARNINGS", "off")

if os.environ.get("PYTEST_XDIST_WORKER"):
    # One thread per pytest-xdist worker (and per process a test starts): with a worker per
    # core, more threads only wait for each other (OpenMP spin-waits on a busy core).
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(1)


def pytest_configure(config):
    """Under pytest-xdist (``-n 2``), a worker takes one test at a time (``--maxschedchunk=1``
    unless given): with the slow tests first (below), the long tests start early on whichever
    worker is free and the short ones even the two workers out at the end, instead of one long
    test ending the run alone. (Set here, not in pyproject's addopts: a pytest without
    pytest-xdist, as on the GPU machine, would refuse the option.)"""
    if getattr(config.option, "maxschedchunk", 1) is None:
        config.option.maxschedchunk = 1


def pytest_collection_modifyitems(config, items):
    """The tests marked ``forks`` first, in every run: they fork this process (:func:`forked_cli`),
    and once a process has run a compiled backward (the ``torch.compile`` tests) the children
    forked from it cannot use autograd. Then, under pytest-xdist, the slow tests (in file order),
    then the rest (see :func:`pytest_configure`). Every worker sorts its collection the same way
    (xdist requires the same order) and runs the tests it is sent in that order, so on each
    worker the forking tests come before any compile test. A run without xdist keeps file order
    after the forking tests."""
    xdist = bool(os.environ.get("PYTEST_XDIST_WORKER"))
    items.sort(key=lambda item: (item.get_closest_marker("forks") is None,
                                 xdist and item.get_closest_marker("slow") is None))


@pytest.fixture
def forked_cli(request):
    """:func:`run_helpers.forked_cli`, for a test marked ``forks`` (run first: see
    :func:`pytest_collection_modifyitems`); fails naming the cause when this process can no
    longer fork children that use autograd."""
    from run_helpers import fork_can_use_autograd, forked_cli

    if request.node.get_closest_marker("forks") is None:
        pytest.fail("a test that forks the test process (forked_cli) must be marked @pytest.mark.forks")
    import torch

    # One thread while the test runs (as under pytest-xdist): a child forked from a process
    # whose OpenMP pool has threads hangs in its first parallel region, and the test's own runs
    # then use the child's thread count (the same kernels, the same bits).
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    request.addfinalizer(lambda: torch.set_num_threads(threads))
    if not fork_can_use_autograd():
        pytest.fail("this process ran a compiled backward before this test, so its forked children cannot use "
                    "autograd: the tests marked forks must run before the torch.compile tests (tests/conftest.py)")
    return forked_cli


@pytest.fixture(scope="session")
def synthetic_root(tmp_path_factory):
    """The synthetic Smarthome-layout dataset with one video per (subject, class):
    18 subjects x 5 classes = 90 real mp4 files."""
    from dna_video.data.synthetic import generate_synthetic_dataset

    root = tmp_path_factory.mktemp("synthetic") / "smarthome"
    generate_synthetic_dataset(root, videos_per_subject_class=1, seed=0)
    return root


@pytest.fixture(scope="session")
def smarthome_tree(tmp_path_factory):
    """A mini Toyota Smarthome clip folder of real mp4 files (see video_trees.py):
    (root, facts)."""
    from video_trees import build_smarthome_tree

    root = tmp_path_factory.mktemp("smarthome") / "mp4"
    return root, build_smarthome_tree(root)


@pytest.fixture(scope="session")
def ntu_tree(tmp_path_factory):
    """A mini NTU RGB+D 60 folder of real AVI and mp4 files (see video_trees.py):
    (root, facts)."""
    from video_trees import build_ntu_tree

    root = tmp_path_factory.mktemp("ntu") / "nturgb+d_rgb"
    return root, build_ntu_tree(root)


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory):
    """A tiny DnA model trained on dark vs bright videos (analysis_trees.py): (checkpoint path,
    the evaluation settings it was trained with)."""
    from analysis_trees import train_tiny_model

    from dataclasses import asdict

    from dna_video.prediction.torch_backend import load_model

    ckpt = train_tiny_model(tmp_path_factory.mktemp("tiny_model"))
    return ckpt, asdict(load_model(ckpt).settings)


@pytest.fixture(scope="session")
def new_videos(tmp_path_factory):
    """Unseen videos of each class of the tiny model: {"dark": path, "bright": path}."""
    from analysis_trees import write_class_videos

    videos = write_class_videos(tmp_path_factory.mktemp("new_videos"), 1, seed=7)
    return {("dark", "bright")[label]: path for path, label in videos}
