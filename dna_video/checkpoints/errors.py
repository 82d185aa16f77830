"""The error every checkpoint reader raises: below :mod:`.io` and :mod:`.sources`, which both raise it."""

from __future__ import annotations

__all__ = ["CheckpointError"]


class CheckpointError(ValueError):
    """A file that is not a usable checkpoint, or one that does not fit the model."""
