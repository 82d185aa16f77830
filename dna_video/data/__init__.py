"""Video data: frame sampling, decord decoding, clip transforms, datasets and DataModules."""

from .datamodule import SplitRecords, SplitSummary, VideoDataModule
from .dataset import VideoClipDataset, VideoRecord, collate_videos
from .listfile import VideoListDataModule
from .ntu import NTURGBD60
from .sampling import FrameSampler
from .smarthome import ToyotaSmarthome
from .synthetic import SyntheticSmarthome, generate_synthetic_dataset

__all__ = [
    "FrameSampler",
    "NTURGBD60",
    "SplitRecords",
    "SplitSummary",
    "SyntheticSmarthome",
    "ToyotaSmarthome",
    "VideoClipDataset",
    "VideoDataModule",
    "VideoListDataModule",
    "VideoRecord",
    "collate_videos",
    "generate_synthetic_dataset",
]
