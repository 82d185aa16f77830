"""``python -m dna_video.probe {fit,validate,test,predict} --config configs/probe_quickstart.yaml``:
the command line of ``cli.py`` around :class:`~dna_video.probe_module.ProbeClassifierModule`
(``cli.py``'s options plus the probe's; ``--config NAME`` also finds the configs shipped with the
package, as ``python -m dna_video``).

A module of its own, above the command line, so that the network (:mod:`dna_video.probe`)
imports nothing of Lightning, its LightningModule or the command line.
"""

import sys

from dna_video.__main__ import resolve_config_names
from dna_video.cli import console_main
from dna_video.cli import main as cli_main
from dna_video.probe_module import ProbeClassifierModule



def main(args: list[str] | None = None, run: bool = True):
    """The dna-video LightningCLI (links, checkpoints, run defaults, ``--test_after_fit``)
    around :class:`~dna_video.probe_module.ProbeClassifierModule`."""
    return cli_main(args, run, model_class=ProbeClassifierModule)


if __name__ == "__main__":
    sys.argv[1:] = resolve_config_names(sys.argv[1:])
    console_main(model_class=ProbeClassifierModule)
