"""NTU RGB+D 60: the DataModule. The file layout (sample names, protocols, the catalog of a
root) is :mod:`.ntu_layout`'s, re-exported here.

RGB files are named ``SsssCcccPpppRrrrAaaa_rgb.avi`` (setup, camera, performer, replication,
action; label = action - 1); the same names transcoded to ``.mp4``, with or without
``_rgb``, are accepted. The protocols (``cs``, ``cv``) and the ranges of each field are
read from ``data/ntu60_splits.yaml``, the class names from ``data/ntu60_classes.txt``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Literal

from dna_video.data.catalog import Catalog
from dna_video.data.datamodule import ProtocolDataModule
from dna_video.data.ntu_layout import (  # noqa: F401  (the layout's names, importable from here as before)
    EXCLUSION_LIST,
    MALFORMED,
    NOT_VIDEO,
    NTU120,
    NTU120_RANGES,
    NTU_SUFFIXES,
    PROTOCOLS,
    RANGES,
    STRICT_REASONS,
    UNKNOWN_FIELD,
    NTUName,
    list_ntu_files,
    ntu_catalog,
    ntu_protocol,
    parse_ntu_name,
    parse_ntu_names,
    read_sample_list,
)

__all__ = ["NTUName", "parse_ntu_name", "parse_ntu_names", "ntu_protocol", "ntu_catalog", "read_sample_list", "NTURGBD60",
           "PROTOCOLS"]


class NTURGBD60(ProtocolDataModule):
    """NTU RGB+D 60 (Shahroudy et al., CVPR 2016) RGB videos, split by a protocol.

    Protocols (``data/ntu60_splits.yaml``): ``cs`` (train on the 20 training performers,
    test on the other 20) and ``cv`` (train on cameras 2 and 3, test on camera 1). The
    main metric is top-1 accuracy (``val/top1``).

    Args:
        root: the folder of the videos, searched recursively (``nturgb+d_rgb`` with the
            ``*_rgb.avi`` files, or the mp4 files written by
            ``dna-video prepare ntu60 ... --transcode``).
        protocol: ``cs`` or ``cv``.
        exclude_file: optional text file of sample names to leave out (counted), e.g. the
            302 samples without skeletons; one name a line.
        val_fraction: fraction of the training performances (all cameras of a performance
            together, per action) held out for validation. 0: NTU has no validation split,
            so validation runs on the test split (what published results do; then do not
            select checkpoints on it).
        val_seed: seed of the validation draw (the same seed holds out the same videos).
        strict: stop with an error naming them on malformed file names and field values
            outside NTU-60, instead of leaving them out with a count.
        kwargs: everything :class:`VideoDataModule` takes (batch size, sampling, transforms).
    """

    def __init__(
        self,
        root: str,
        protocol: Literal["cs", "cv"] = "cs",
        exclude_file: str | None = None,
        val_fraction: float = 0.0,
        val_seed: int = 0,
        strict: bool = False,
        **kwargs,
    ) -> None:
        super().__init__(root=root, strict=strict, **kwargs)
        self.protocol = ntu_protocol(protocol)
        self.exclude_file = exclude_file
        if not 0.0 <= val_fraction < 1.0:
            raise ValueError(f"val_fraction must be in [0, 1), got {val_fraction}")
        self.val_fraction = val_fraction
        self.val_seed = val_seed

    def list_files(self) -> tuple[list[str], str]:
        return list_ntu_files(self.root)

    def make_catalog(self, files: Sequence[str | os.PathLike]) -> Catalog:
        exclude = read_sample_list(self.exclude_file) if self.exclude_file else set()
        return ntu_catalog(files, self.protocol, exclude, self.val_fraction, self.val_seed)
