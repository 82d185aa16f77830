"""dna-video's one command from a checkout: ``python cli.py fit --config configs/quickstart.yaml``,
``python cli.py predict CKPT VIDEO...``; the same program as the installed ``dna-video`` (see
``dna_video/__main__.py`` and README.md, "Commands")."""

import os

# OpenMP threads that sleep when idle instead of spinning, read once when torch loads: with
# the default (spin) a process whose cores are shared loses most of its time to spinning
# threads (benchmarks/README.md). OMP_WAIT_POLICY=ACTIVE gets the default back.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from dna_video.__main__ import main  # noqa: E402

if __name__ == "__main__":
    main()
