"""Video data: frame sampling, decoding (decord, PyAV, torchcodec), clip transforms, datasets and
DataModules.

Names are imported on first use (PEP 562), so that a DataLoader worker started with
``spawn``, which imports only what unpickling the dataset needs, does not import Lightning.
"""

from importlib import import_module

_EXPORTS = {
    "FrameSampler": "sampling",
    "NTURGBD60": "ntu",
    "SplitRecords": "datamodule",
    "SplitSummary": "datamodule",
    "SyntheticDistractors": "distractors",
    "SyntheticSmarthome": "synthetic",
    "ToyotaSmarthome": "smarthome",
    "VideoClipDataset": "dataset",
    "VideoDataModule": "datamodule",
    "VideoListDataModule": "listfile",
    "VideoRecord": "dataset",
    "collate_videos": "dataset",
    "generate_synthetic_dataset": "synthetic",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        value = getattr(import_module(f".{_EXPORTS[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + __all__)
