"""Defaults that layers which may not import each other share (the clip sampler and the
network), each stated once here. ``tests/test_defaults.py`` refuses the literal anywhere else.

The default attention kind is stated beside the kinds: :data:`dna_video.models.attention.DEFAULT_ATTENTION`.
"""

from __future__ import annotations

__all__ = ["IMG_SIZE", "NUM_FRAMES"]

#: Frames per clip: the paper's TimeSformer-B clips (8 x 224 x 224). The default of the frame
#: sampler, the evaluation settings, the DataModules and the network's ``time_embed``.
NUM_FRAMES = 8

#: Input side in pixels (square crops): the paper's 224. The default of the networks, the tasks,
#: the evaluation crop and the image DataModule.
IMG_SIZE = 224
