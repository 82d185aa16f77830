"""An exported model (``dna-video export onnx``) on video files without PyTorch: ONNX Runtime for
the network, numpy (and Pillow's resize) for the evaluation's preprocessing.

* :mod:`.preprocess`: a clip's evaluation views, as :class:`~dna_video.data.transforms.EvalClipTransform`
  makes them (short side resized to the crop, 1 or 3 crops, normalised);
* :mod:`.model`: :class:`~.model.OnnxModel`, the ONNX Runtime session with the settings the file
  carries (class names, sampling, crop, mean and std, views and how they combine);
* :mod:`.inference`: a video file's views and probabilities (``predict``), and a long video's
  timeline (``predict --timeline``), with the same frame sampling, windows, segments and files as
  the PyTorch path (:mod:`dna_video.data.sampling`, :mod:`dna_video.analysis.windows`).

Nothing here imports torch (``tests/test_onnx_runtime.py`` runs it where importing torch fails).
``dna-video predict model.onnx VIDEO...`` is the command (:mod:`dna_video.tools.predict_onnx`).
"""
