"""pytest plugin of ``benchmarks/gpu_check.sh`` (``-p tests.gpu_import_guard``): once the gpu
tests are collected (``tests/test_gpu.py`` and what it imports), the session stops if any
package the GPU machine lacks was imported. Not a test module; the regular suite does not load it.
"""

import sys

import pytest

#: Not on the GPU machine (KINDS.md of the device tool): the checks must run without them.
FORBIDDEN = ("lightning", "pytorch_lightning", "decord", "av", "jsonargparse", "pytorchvideo")


def pytest_collection_finish(session: pytest.Session) -> None:
    loaded = [name for name in FORBIDDEN if name in sys.modules]
    if loaded:
        raise pytest.UsageError(f"the gpu checks import {loaded}, which the GPU machine lacks")
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(f"imports: ok (none of {', '.join(FORBIDDEN)})")
