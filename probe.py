"""dna-video probes: ``python probe.py {fit,validate,test,predict} --config configs/probe_quickstart.yaml``.

Learned probes over a frozen TimeSformer (softmax or DnA cross-attention); the same options
as ``cli.py`` plus the probe's (``python probe.py fit --help``). See docs-snippets/probe.md.
"""

import os

# Sleeping OpenMP threads on shared cores, as cli.py (read once, when torch loads).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from dna_video.probe_module import main  # noqa: E402

if __name__ == "__main__":
    main()
