"""``python -m dna_video`` and the ``dna-video`` command: the command line of ``python cli.py``
for an installed copy, which has no ``cli.py`` and no ``configs/`` folder beside it.

    python -m dna_video fit --config quickstart          # a config shipped with the package
    python -m dna_video fit --config my_run.yaml         # any config file
    python -m dna_video fit --config quickstart --print_config > my_run.yaml   # to edit one

``--config NAME`` (or ``-c NAME``) with a bare name that is not a file names one of the
example configs of the repository's ``configs/`` folder, shipped as the package data of
``dna_video.configs``; ``python -m dna_video configs`` lists them with their paths.
"""

from __future__ import annotations

import sys

from dna_video.training.configs import packaged_configs, resolve_config_names

__all__ = ["main", "packaged_configs", "resolve_config_names"]

def main() -> None:
    args = sys.argv[1:]
    if args[:1] == ["configs"]:
        for name, path in packaged_configs().items():
            print(f"{name}\t{path}")
        return
    sys.argv[1:] = resolve_config_names(args)
    from dna_video.training.cli import main as cli_main

    cli_main()


if __name__ == "__main__":
    main()
