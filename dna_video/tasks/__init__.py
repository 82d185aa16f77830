"""The LightningModules: loss, metrics, evaluation and optimisation around a network of
:mod:`dna_video.models`. Video classification (:mod:`.video`), image classification
(:mod:`.image`) and probes over a frozen backbone (:mod:`.probe`); metrics and the combination
of a video's views (:mod:`.metrics`, :mod:`.views`)."""
