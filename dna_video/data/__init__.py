"""Video data: frame sampling, decord decoding, clip transforms, datasets and DataModules."""

from .datamodule import VideoDataModule
from .dataset import VideoClipDataset, VideoRecord, collate_videos
from .sampling import FrameSampler
from .synthetic import SyntheticSmarthome, generate_synthetic_dataset

__all__ = [
    "FrameSampler",
    "SyntheticSmarthome",
    "VideoClipDataset",
    "VideoDataModule",
    "VideoRecord",
    "collate_videos",
    "generate_synthetic_dataset",
]
