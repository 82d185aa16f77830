"""``python -m dna_video.models.probe {fit,validate,test,predict} --config configs/probe_quickstart.yaml``:
the command line of ``cli.py`` around :class:`~dna_video.tasks.probe.ProbeClassifierModule`
(``cli.py``'s options plus the probe's; ``--config NAME`` also finds the configs shipped with the
package, as ``python -m dna_video``).

A module of its own, above the command line, so that the network (:mod:`dna_video.models.probe`)
imports nothing of Lightning, its LightningModule or the command line.
"""

import sys

from dna_video.training.configs import resolve_config_names
from dna_video.training.cli import console_main
from dna_video.training.cli import main as cli_main
from dna_video.tasks.probe import ProbeClassifierModule



def main(args: list[str] | None = None, run: bool = True):
    """The dna-video LightningCLI (links, checkpoints, run defaults, ``--test_after_fit``)
    around :class:`~dna_video.tasks.probe.ProbeClassifierModule`."""
    return cli_main(args, run, model_class=ProbeClassifierModule)


if __name__ == "__main__":
    sys.argv[1:] = resolve_config_names(sys.argv[1:])
    console_main(model_class=ProbeClassifierModule)
