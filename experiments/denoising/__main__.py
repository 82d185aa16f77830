"""``python -m experiments.denoising``: :mod:`experiments.denoising.cli`."""

import sys

from experiments.denoising.cli import main

sys.exit(main())
