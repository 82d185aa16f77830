"""Video data: frame sampling, decoding (decord, PyAV, torchcodec), clip transforms, datasets and
DataModules.

Names are imported on first use (PEP 562), so that a DataLoader worker started with
``spawn``, which imports only what unpickling the dataset needs, does not import Lightning.
"""

from dna_video.common.lazy import lazy_exports

_EXPORTS = {
    "FrameSampler": ".sampling",
    "NTURGBD60": ".ntu",
    "SplitRecords": ".datamodule",
    "SplitSummary": ".datamodule",
    "SyntheticDistractors": ".distractors",
    "SyntheticSmarthome": ".synthetic",
    "ToyotaSmarthome": ".smarthome",
    "VideoClipDataset": ".dataset",
    "VideoDataModule": ".datamodule",
    "VideoListDataModule": ".listfile",
    "VideoRecord": ".dataset",
    "collate_videos": ".dataset",
    "generate_synthetic_dataset": ".synthetic",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
