"""Prediction: a trained model on video files, long videos and live sources, in one pipeline over
numpy arrays, whatever runs the network (``dna-video predict``, :mod:`dna_video.tools.predict`).

* :mod:`.backend`: the protocol a model follows (prepare frames, logits of views) and what the
  backends share; :mod:`.torch_backend` (a checkpoint's PyTorch network, the one module here
  that imports torch) and :mod:`.onnx_backend` (an exported ``.onnx`` file on ONNX Runtime);
* :mod:`.videos`: which videos a command line names (files, folders, list files);
* :mod:`.views`: a video's evaluation views (numpy preprocessing, clips x crops);
* :mod:`.pipeline`: one answer per video (:func:`~.pipeline.predict_videos`), features;
* :mod:`.records`: per-video records, the CSV and the console table;
* :mod:`.windows`, :mod:`.timeline`: a long video's sliding windows, its timeline, segments and
  files (``--timeline``);
* :mod:`.stream`: windows answered as a live source's frames arrive (``--stream``);
* :mod:`.annotate`: the video with the labels (and attention) drawn on it (``--annotate``).

Importing this package or any module but :mod:`.torch_backend` imports no torch. The names
below load their module on first use.
"""

from __future__ import annotations

from dna_video.common.lazy import lazy_exports

# Public name -> the module of this package that defines it.
_EXPORTS = {
    "Backend": ".backend",
    "TorchModel": ".torch_backend",
    "load_model": ".torch_backend",
    "OnnxModel": ".onnx_backend",
    "load_onnx_model": ".onnx_backend",
    "collect_videos": ".videos",
    "load_views": ".views",
    "Predictions": ".pipeline",
    "predict_videos": ".pipeline",
    "write_features": ".pipeline",
    "Timeline": ".timeline",
    "video_timeline": ".timeline",
    "write_timeline": ".timeline",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
