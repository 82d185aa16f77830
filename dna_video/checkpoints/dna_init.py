"""DnA's negative-branch initialisation policies; they live with the attention kinds
(:mod:`dna_video.models.attention.negative_init`)."""

from dna_video.models.attention.negative_init import DNA_INIT_POLICIES, init_negative_branch, orthogonal_complement_like

__all__ = ["DNA_INIT_POLICIES", "init_negative_branch", "orthogonal_complement_like"]
