"""Shared fixtures: small real video datasets written once per test session."""

import os

import pytest

# Lightning's CLI prints jsonargparse deprecation warnings otherwise.
os.environ.setdefault("JSONARGPARSE_DEPRECATION_WARNINGS", "off")


@pytest.fixture(scope="session")
def synthetic_root(tmp_path_factory):
    """The synthetic Smarthome-layout dataset with one video per (subject, class):
    18 subjects x 6 classes = 108 real mp4 files."""
    from dna_video.data.synthetic import generate_synthetic_dataset

    root = tmp_path_factory.mktemp("synthetic") / "smarthome"
    generate_synthetic_dataset(root, videos_per_subject_class=1, seed=0)
    return root
