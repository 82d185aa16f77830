"""Shared fixtures: small real video datasets written once per test session."""

import os

import pytest

# Lightning's CLI prints jsonargparse deprecation warnings otherwise.
os.environ.setdefault("JSONARGPARSE_DEPRECATION_WARNINGS", "off")


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
