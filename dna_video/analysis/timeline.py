"""A long, untrimmed video as a timeline: the model's clip window slid along it.

Windows. A clip is T frames ``s`` file frames apart (the sampling rate at the target frame
rate: :meth:`~dna_video.data.sampling.FrameSampler.stride`), so a window covers T x s frames
(T x sampling rate / target fps seconds). Windows start at 0, stride, 2 x stride... of the
file's frames, and one more ends at the video's end when a tail is left over; a video shorter
than one window has one window, its frames repeated as in evaluation. The default stride is
half the window rounded down to whole sampling steps: windows then sample the same frames
where they overlap.

Decoding. The sampled frames of all windows are decoded once, in order, in chunks
(:class:`~dna_video.data.video.FrameStream`); each frame is resized, cropped and normalised
when it arrives (evaluation's steps, frame by frame: the same numbers, done once per frame
rather than once per window) and kept only until the last window that samples it has gone
through the network. Memory holds one window's frames plus one chunk, whatever the video's
length.

Each window's spatial views (the evaluation's crops) are combined as the model combines views
(:func:`~dna_video.tasks.views.mean_view_probs`); the probabilities can be smoothed over
neighbouring windows (:func:`smooth`) and consecutive windows of the same top-1 class make a
segment (:func:`segments_of`; segments shorter than a minimum are merged into a neighbour).
:func:`write_timeline` writes, named after the video: ``<stem>_windows.csv`` (``start_s,
end_s`` and the top-k classes with their probabilities per window), ``<stem>_segments.json``,
``<stem>.srt`` (the segments as subtitles: any player shows the labels) and
``<stem>_timeline.png`` (:func:`~dna_video.analysis.plotting.timeline_figure`), each atomically.

Everything but the network is numpy, in :mod:`.windows` (its names are importable from here
too): the ONNX Runtime timeline (:mod:`dna_video.runtime`) uses the same pieces without torch.
This module is the PyTorch network over them (:func:`video_timeline`).
"""

from __future__ import annotations

import torch

from dna_video.analysis.inference import LoadedModel
from dna_video.analysis.windows import (
    Segment,
    Stride,
    Timeline,
    TimelineFiles,
    TimelineStats,
    Windows,
    describe,
    parse_stride,
    plan_windows,
    segments_of,
    sliding_timeline,
    smooth,
    srt_text,
    srt_timestamp,
    window_clips,
    windows_csv,
    write_timeline,
)
from dna_video.analysis.window_network import WindowNetwork

__all__ = [
    "Stride", "parse_stride", "Windows", "plan_windows", "window_clips", "TimelineStats", "Timeline",
    "video_timeline", "smooth", "Segment", "segments_of", "windows_csv", "srt_timestamp", "srt_text",
    "TimelineFiles", "write_timeline", "describe",
]


@torch.no_grad()
def video_timeline(model: LoadedModel, path: str, stride: Stride | None = None, device: str | None = None,
                   views_per_pass: int = 32, decode_chunk: int = 32, network: WindowNetwork | None = None) -> Timeline:
    """Slide ``model``'s clip window along the video at ``path`` (see the module's docstring):
    probabilities of every window, the evaluation's crops of each combined
    (:func:`~dna_video.analysis.windows.sliding_timeline` with this network; ``network``: one
    made by the caller, e.g. keeping attention maps, else ``WindowNetwork(model, device)``).

    Raises:
        VideoDecodeError: the file cannot be decoded.
        VideoTooSmallError: a side below the network's patch size.
        ValueError: the model samples ``uniform`` clips.
    """
    settings = model.settings
    network = network or WindowNetwork(model, device)
    return sliding_timeline(path, settings.decoder, settings.sampler, model.class_names, network.prepare,
                            network.probs_of, stride, max(1, views_per_pass // settings.num_crops), decode_chunk,
                            torch.stack, min_side=model.net.patch_size)
