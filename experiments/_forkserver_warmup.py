"""Imported by the fork server of :class:`~experiments.reproducible.ForkedCli` when it is given a
command line to warm up with (environment variable ``DNA_VIDEO_FORKSERVER_WARMUP``, JSON, removed
here so the runs never see it): parses that ``cli.py`` command once with ``--print_config`` (the
parse only: nothing is built, no random stream is drawn), so that jsonargparse's caches of class
signatures and parsers are filled in the server instead of in every forked run (a quick-grid
fit's parse: 2.5 s cold, 0.8 s warm). Whatever fails here only leaves the caches colder."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os

WARMUP_ENV = "DNA_VIDEO_FORKSERVER_WARMUP"


def _warm_up(args: list[str]) -> None:
    from dna_video.training.cli import main

    logger = logging.getLogger("dna_video")
    handlers, level = list(logger.handlers), logger.level
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            main([*args, "--print_config"])
    except BaseException:  # noqa: BLE001 - --print_config ends with SystemExit; anything else: no warm-up
        pass
    finally:
        # The CLI adds a log handler bound to this process's stderr: each run adds its own.
        for handler in [h for h in logger.handlers if h not in handlers]:
            logger.removeHandler(handler)
        logger.setLevel(level)


_args = json.loads(os.environ.pop(WARMUP_ENV, "null"))
if _args:
    _warm_up(_args)
