"""What an error message tells a user to run when an optional package is missing: the pip of the
Python that runs now (``sys.executable -m pip``), the environment the command needs it in. A
bare ``pip`` may be another Python's (the README's commands use ``.venv/bin/pip``)."""

from __future__ import annotations

import sys

__all__ = ["install_extra", "pip_install"]


def pip_install(*requirements: str) -> str:
    """``<this python> -m pip install REQUIREMENTS``."""
    return " ".join([sys.executable, "-m", "pip", "install", *requirements])


def install_extra(extra: str) -> str:
    """How to add the package's optional ``extra`` (``deploy``, ``torchcodec``) to this Python,
    from the checkout, with the versions CI tests."""
    return f"{pip_install('-c', 'constraints.txt', '-e', repr(f'.[{extra}]'))} in the dna-video checkout"
