"""The attention variants the paper compares DnA with; they now live in
:mod:`dna_video.models.attention` (re-exported here)."""

from .models.attention import (  # noqa: F401
    CogAttention,
    DifferentialAttention,
    SharedValueDnA,
    diff_lambda_init,
    kwargs_by_kind,
)

__all__ = ["SharedValueDnA", "DifferentialAttention", "CogAttention", "diff_lambda_init", "kwargs_by_kind"]
