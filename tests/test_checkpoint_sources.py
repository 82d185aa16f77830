"""Checkpoints by name: a Hugging Face Hub id or a URL, read from the standard caches without
network. The tests lay the caches out as huggingface_hub and torch.hub do."""

from __future__ import annotations

import hashlib
import shutil
import urllib.error
from pathlib import Path

import pytest
import torch

from dna_video.checkpoints import CheckpointError, timesformer_from_checkpoint
from dna_video.checkpoints.sources import resolve_source
from test_checkpoints import clip, hf_logits, tiny_hf, TOL

REPO = "tester/tiny-timesformer"
REVISION = "0123456789abcdef0123456789abcdef01234567"


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def offline_hub(tmp_path, monkeypatch):
    """An empty Hugging Face cache, the Hub unreachable."""
    from huggingface_hub import constants

    cache = tmp_path / "hub"
    cache.mkdir()
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    return cache


def lay_out_hub_repo(cache: Path, saved: Path) -> Path:
    """Put a save_pretrained folder into the cache as huggingface_hub stores a download: files in
    blobs/ named by their hash (SHA-256 for LFS weights), snapshots/<commit>/ linking to them,
    refs/main naming the commit."""
    repo = cache / f"models--{REPO.replace('/', '--')}"
    snapshot = repo / "snapshots" / REVISION
    (repo / "blobs").mkdir(parents=True)
    snapshot.mkdir(parents=True)
    for file in saved.iterdir():
        name = sha256(file) if file.suffix == ".safetensors" else hashlib.sha1(file.read_bytes()).hexdigest()
        blob = repo / "blobs" / name
        shutil.copy(file, blob)
        (snapshot / file.name).symlink_to(Path("../../blobs") / name)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(REVISION)
    return snapshot


def test_hub_id_is_read_from_the_cache_offline_and_gives_the_hub_models_logits(tmp_path, offline_hub):
    hf = tiny_hf()
    hf.save_pretrained(tmp_path / "saved")
    snapshot = lay_out_hub_repo(offline_hub, tmp_path / "saved")

    assert resolve_source(REPO) == snapshot
    assert resolve_source(f"hf://{REPO}@{REVISION}") == snapshot
    model, report = timesformer_from_checkpoint(REPO, drop_path_rate=0.0)
    assert report.layout == "huggingface" and not report.unused
    video = clip()
    with torch.no_grad():
        torch.testing.assert_close(model.eval()(video), hf_logits(hf, video), **TOL)


def test_a_damaged_hub_download_is_caught_by_its_checksum(tmp_path, offline_hub):
    tiny_hf().save_pretrained(tmp_path / "saved")
    snapshot = lay_out_hub_repo(offline_hub, tmp_path / "saved")
    blob = (snapshot / "model.safetensors").resolve()
    blob.write_bytes(blob.read_bytes()[:-10])  # truncated
    with pytest.raises(CheckpointError, match=r"model.safetensors .* does not match its SHA-256"):
        resolve_source(REPO)


def test_a_hub_id_not_in_the_cache_offline_says_what_to_download_and_where(offline_hub):
    with pytest.raises(CheckpointError) as error:
        resolve_source("facebook/timesformer-base-finetuned-k400")
    message = str(error.value)
    assert "huggingface-cli download facebook/timesformer-base-finetuned-k400" in message
    assert str(offline_hub) in message and "models--facebook--timesformer-base-finetuned-k400" in message


def test_local_paths_are_never_taken_for_hub_ids(tmp_path, offline_hub):
    assert resolve_source("./runs/last.ckpt") == Path("./runs/last.ckpt")
    with pytest.raises(FileNotFoundError, match="checkpoint not found"):
        timesformer_from_checkpoint("./missing/model.pth")


@pytest.fixture
def url_cache(tmp_path, monkeypatch):
    """torch.hub's cache in tmp_path; any download attempt fails as without network."""
    monkeypatch.setattr(torch.hub, "_hub_dir", str(tmp_path / "torch_hub"))

    def no_network(url, dst, *args, **kwargs):
        raise urllib.error.URLError("network unreachable")

    monkeypatch.setattr(torch.hub, "download_url_to_file", no_network)
    return tmp_path / "torch_hub" / "checkpoints"


def cached_weights(folder: Path, name_template: str) -> tuple[Path, str]:
    """A state dict saved in the cache under a name that may carry its own hash prefix."""
    folder.mkdir(parents=True, exist_ok=True)
    staging = folder.parent / "staging.pth"
    torch.save(tiny_hf().state_dict(), staging)
    digest = sha256(staging)
    path = folder / name_template.format(prefix=digest[:8])
    staging.rename(path)
    return path, digest


def test_url_is_read_from_torch_hub_cache_with_its_hash_checked(url_cache):
    path, digest = cached_weights(url_cache, "tiny-{prefix}.pth")
    assert resolve_source(f"https://example.org/weights/{path.name}") == path
    assert resolve_source(f"https://example.org/weights/{path.name}#sha256={digest}") == path
    model, report = timesformer_from_checkpoint(f"https://example.org/weights/{path.name}", num_heads=2)
    assert report.layout == "huggingface"
    wrong = "0" * 64
    with pytest.raises(CheckpointError, match=f"has SHA-256 {digest}, the URL states {wrong}"):
        resolve_source(f"https://example.org/weights/{path.name}#sha256={wrong}")


def test_url_not_cached_without_network_says_where_to_put_the_file(url_cache):
    with pytest.raises(CheckpointError) as error:
        resolve_source("https://example.org/weights/vit_base.pth")
    assert f"put it at {url_cache / 'vit_base.pth'}" in str(error.value)
