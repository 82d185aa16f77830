"""Where a checkpoint comes from: a local path, a Hugging Face Hub id, or a URL.

``init_from`` (and every reader of checkpoints) accepts, besides a file or folder:

* a Hub id, ``owner/name`` or ``hf://owner/name[@revision]`` (e.g.
  ``facebook/timesformer-base-finetuned-k400``): the model's ``config.json`` and weights are
  fetched once into the standard Hugging Face cache (``HF_HUB_CACHE``, by default
  ``~/.cache/huggingface/hub``) and read from there afterwards, offline too;
* a URL (``https://.../file.pth``): downloaded once into torch's hub cache
  (``torch.hub.get_dir()/checkpoints``), the standard place of ``load_state_dict_from_url``.

Checksums: a Hub file stored through LFS is verified against the SHA-256 the cache names it by,
on every resolution (a truncated or damaged download is caught before it is read); a URL is
verified when it carries its hash, as ``...#sha256=<hex>`` or in torch's file-name convention
``name-<hex prefix>.pth``. Without network, a cached copy is used; without one, the error says
what to download and where to put it.

Licences: :func:`weights_licence` says what is known of the licence of weights someone else
published, from the source's name (:data:`KNOWN_WEIGHTS`, the one table of them); the model
card names it for the weights a run started from.
"""

from __future__ import annotations

import hashlib
import os
import re
import urllib.error
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from dna_video.checkpoints.errors import CheckpointError

__all__ = ["resolve_source", "hub_cache_dir", "url_cache_dir", "WeightsLicence", "KNOWN_WEIGHTS", "weights_licence"]

# What a TimeSformer folder on the Hub needs: its config and its weights.
HUB_PATTERNS = ["config.json", "*.safetensors", "*.safetensors.index.json", "pytorch_model*.bin", "pytorch_model.bin.index.json"]
_HUB_ID = re.compile(r"^(?:hf://)?(?P<repo>[A-Za-z0-9][\w.-]*/[\w.-]+)(?:@(?P<revision>[\w.-]+))?$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
# torch.hub's convention: the first hex digits of the file's SHA-256 after the last dash.
_TORCH_HASH_IN_NAME = re.compile(r"-([a-f0-9]{6,64})\.")


def hub_cache_dir() -> Path:
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE)


def url_cache_dir() -> Path:
    import torch.hub

    return Path(torch.hub.get_dir()) / "checkpoints"


def resolve_source(source: str | os.PathLike[str]) -> Path:
    """A local path for ``source``; Hub ids and URLs are fetched into (or found in) their cache.

    A path that exists is returned as it is; so is anything that is neither a Hub id nor a URL
    (the reader then reports it as not found).
    """
    path = Path(source)
    if path.exists():
        return path
    text = os.fspath(source)
    if text.startswith(("http://", "https://")):
        return _from_url(text)
    match = _HUB_ID.match(text)
    if match and (text.startswith("hf://") or not text.startswith((".", "/"))):
        return _from_hub(match["repo"], match["revision"])
    return path


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _from_hub(repo_id: str, revision: str | None) -> Path:
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    cache = hub_cache_dir()
    try:
        folder = Path(snapshot_download(repo_id, revision=revision, allow_patterns=HUB_PATTERNS))
    except LocalEntryNotFoundError as e:
        raise CheckpointError(
            f"{repo_id}: not in the Hugging Face cache ({cache}) and the Hub cannot be reached ({e}). "
            f"On a machine with network run `huggingface-cli download {repo_id} --include config.json '*.safetensors'` "
            f"and copy {cache}/models--{repo_id.replace('/', '--')} to {cache}, or download the repository's "
            "config.json and weights into a folder and pass that folder."
        ) from None
    except Exception as e:  # the Hub says the repository or revision does not exist, or refuses access
        raise CheckpointError(f"{repo_id}: cannot fetch from the Hugging Face Hub: {e}") from None
    _verify_hub_files(repo_id, folder)
    return folder


def _verify_hub_files(repo_id: str, folder: Path) -> None:
    """Compare each LFS file with the SHA-256 its cache blob is named by."""
    for file in sorted(folder.iterdir()):
        blob = file.resolve()
        if file.is_symlink() and _SHA256.match(blob.name) and _sha256(blob) != blob.name:
            raise CheckpointError(
                f"{repo_id}: {file.name} in the cache ({blob}) does not match its SHA-256 "
                f"{blob.name} (a truncated or damaged download): delete {blob} and run again."
            )


def _expected_url_hash(url: str) -> tuple[str, str] | None:
    """(hash text, kind) where the URL states its file's SHA-256: a full one or a prefix."""
    fragment = urllib.parse.urlsplit(url).fragment
    if fragment.startswith("sha256="):
        return fragment.removeprefix("sha256=").lower(), "sha256"
    match = _TORCH_HASH_IN_NAME.search(Path(urllib.parse.urlsplit(url).path).name)
    return (match.group(1), "prefix") if match else None


def _from_url(url: str) -> Path:
    import torch.hub

    name = Path(urllib.parse.unquote(urllib.parse.urlsplit(url).path)).name
    if not name:
        raise CheckpointError(f"{url}: the URL names no file")
    target = url_cache_dir() / name
    expected = _expected_url_hash(url)
    if not target.is_file():
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            # Writes to a temporary file and moves it into place when complete.
            torch.hub.download_url_to_file(url, str(target), progress=True)
        except (urllib.error.URLError, OSError, TimeoutError) as e:
            raise CheckpointError(
                f"{url}: not in the cache and cannot be downloaded ({e}). "
                f"Download it on a machine with network and put it at {target}."
            ) from None
    if expected is not None:
        digest = _sha256(target)
        wanted, kind = expected
        if (digest != wanted) if kind == "sha256" else not digest.startswith(wanted):
            raise CheckpointError(
                f"{url}: {target} has SHA-256 {digest}, the URL states {wanted}: delete the file and "
                "download it again."
            )
    return target


@dataclass(frozen=True)
class WeightsLicence:
    """What is known of the licence of weights a model was started from.

    ``licence`` is an SPDX identifier, or None where this project does not know it; ``terms``
    says, in a sentence, what the licence asks of a model made from the weights.
    """

    publisher: str
    licence: str | None
    terms: str

    @property
    def non_commercial(self) -> bool:
        return bool(self.licence) and "-NC" in self.licence


# The official TimeSformer repository puts its work, the Kinetics / SSv2 / HowTo100M weights of its
# model zoo included, under CC BY-NC 4.0 (its README's licence section and LICENSE file); Hugging
# Face's `facebook/timesformer-*` models are those weights converted, and their pages state
# cc-by-nc-4.0.
_CC_BY_NC_TERMS = (
    "non-commercial use only, with attribution; a model fine-tuned from these weights is an "
    "adaptation of them and carries the same restriction"
)
OFFICIAL_TIMESFORMER = WeightsLicence(
    "the official TimeSformer release (facebookresearch/TimeSformer)", "CC-BY-NC-4.0", _CC_BY_NC_TERMS
)
HUB_TIMESFORMER = WeightsLicence(
    "Meta's TimeSformer weights on the Hugging Face Hub (the official release, converted)", "CC-BY-NC-4.0",
    _CC_BY_NC_TERMS,
)
TIMM_VIT = WeightsLicence(
    "timm's ImageNet ViT weights", None,
    "the licence stated on the weights' own model page (timm names one per model; dna-video does not "
    "record it): check it before publishing or using this model commercially",
)

#: Weight sources recognised by name -> what is known of their licence. A pattern is searched in
#: the source as given (a path, a Hub id or a URL).
KNOWN_WEIGHTS: tuple[tuple[re.Pattern[str], WeightsLicence], ...] = (
    (re.compile(r"^(?:hf://)?facebook/timesformer-", re.IGNORECASE), HUB_TIMESFORMER),
    # The file names of the official release (TimeSformer_divST_8x32_224_K400.pyth, ...).
    (re.compile(r"(?:^|[/\\])TimeSformer_(?:divST|jointST|spaceOnly)_[^/\\]*\.pyth$"), OFFICIAL_TIMESFORMER),
    (re.compile(r"^(?:hf://|hf-hub:)?timm/|rwightman/pytorch-image-models/releases/|storage\.googleapis\.com/vit_models/"),
     TIMM_VIT),
)

_UNKNOWN_TERMS = (
    "dna-video does not know the licence of these weights: check it before publishing or using "
    "this model, which is made from them"
)
# A .pyth is the container of the official TimeSformer code and of its forks (the DnA reference).
_PYTH_TERMS = (
    " (a .pyth: the file format of the official TimeSformer code and its forks. If these are the "
    "official release's weights, or were fine-tuned from them, CC-BY-NC-4.0 applies; the DnA "
    "reference repository publishes no licence file, so no licence is granted for weights taken "
    "from it: ask its authors)"
)


def weights_licence(source: str | os.PathLike[str]) -> WeightsLicence:
    """What is known of the licence of the weights at ``source`` (a path, Hub id or URL), from
    its name; an unrecognised source gets ``licence=None`` and says so."""
    text = os.fspath(source)
    for pattern, licence in KNOWN_WEIGHTS:
        if pattern.search(text):
            return licence
    terms = _UNKNOWN_TERMS + (_PYTH_TERMS if text.lower().endswith(".pyth") else "")
    return WeightsLicence("unknown", None, terms)
