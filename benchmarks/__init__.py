"""Benchmark suite: ``python -m benchmarks`` (see ``benchmarks/__main__.py``).

OpenMP threads sleep when idle, as in ``cli.py`` (set before torch loads): the suite measures
what the command line runs. See README, Performance.
"""

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
