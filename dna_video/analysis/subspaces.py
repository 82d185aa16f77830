"""Geometry of DnA's positive and negative projections, per attention module and head.

For head h of a DnA module, the block W_h of a projection (torch's (out, in) layout: d x D)
reads a d-dimensional subspace of the token space R^D: its ROW space (the column space of
W_h^T; the column space of W_h itself is all of R^d). Per head and pair (V+ / V-, Q+ / Q-):

* the principal angles between the two row spaces, in degrees
  (``scipy.linalg.subspace_angles(W+_h.T, W-_h.T)``), their mean and minimum;
* the normalised Frobenius inner product <W+_h, W-_h>_F / (|W+_h|_F |W-_h|_F), signed in this
  project's convention (the negative branch is ADDED, ``+ alpha_h``: the reference's ViT fork
  and VisCoP subtract it, which flips the sign of a learned V-) and its absolute value;
* alpha_h.

Against a reference checkpoint (e.g. the one fine-tuning started from): intruder dimensions
(Shuttleworth et al., arXiv 2410.21228) of each whole projection matrix: among its top ``k``
left singular vectors, those whose largest |cosine| to every left singular vector of the
reference's matrix is below ``epsilon``; and the change of every figure above.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from scipy.linalg import subspace_angles
from torch import Tensor

from dna_video.models.attention import Attention, kind_of
from dna_video.models.timesformer import TimeSformer

__all__ = ["CONVENTION", "head_blocks", "pair_measures", "subspace_records", "intruder_dimensions",
           "intruder_records", "compare_records"]

CONVENTION = "+alpha: out = softmax(Q+K)V+ + alpha * softmin(Q-K)V-"


def head_blocks(weight: Tensor, num_heads: int) -> list[np.ndarray]:
    """The (d, D) row blocks of a (H*d, D) projection weight, one per head, as float64."""
    return [w.double().cpu().numpy() for w in weight.detach().chunk(num_heads, dim=0)]


def pair_measures(w_pos: np.ndarray, w_neg: np.ndarray) -> dict[str, Any]:
    """Principal angles between the row spaces of two (d, D) blocks and their normalised
    Frobenius inner product (signed, and absolute)."""
    angles = np.degrees(subspace_angles(w_pos.T, w_neg.T))
    norm = np.linalg.norm(w_pos) * np.linalg.norm(w_neg)
    frobenius = float((w_pos * w_neg).sum() / norm) if norm > 0 else float("nan")
    return {
        "angles_deg": [float(a) for a in angles],
        "mean_deg": float(angles.mean()),
        "min_deg": float(angles.min()),
        "frobenius": frobenius,
        "frobenius_abs": abs(frobenius),
    }


def _has_negative_pair(module: Attention) -> bool:
    """Whether the module's kind has a negative query AND its own negative value (DnA)."""
    kind = kind_of(module)
    return bool(kind and kind.negative and kind.negative.query and kind.negative.value)


def _projections(module: Attention) -> dict[str, Tensor]:
    """The D x D weights of Q+, V+ (rows of ``qkv``), and Q-, V- where the kind has them."""
    q_pos, _, v_pos = module.qkv.weight.detach().chunk(3, dim=0)
    weights = {"q_pos": q_pos, "v_pos": v_pos}
    if _has_negative_pair(module):
        negative = kind_of(module).negative
        weights["q_neg"] = getattr(module, negative.query).weight.detach()
        weights["v_neg"] = getattr(module, negative.value).weight.detach()
    return weights


def _alpha(module: Attention) -> list[float]:
    return kind_of(module).negative.weight_of(module).detach().double().cpu().tolist()


def _dna_modules(net: TimeSformer) -> dict[str, Attention]:
    """The attention modules with a negative query/value pair (DnA kinds)."""
    return {name: m for name, m in net.attention_modules().items() if _has_negative_pair(m)}


def _where(name: str) -> tuple[int, str]:
    parts = name.split(".")
    return int(parts[1]), "temporal" if parts[-1] == "temporal_attn" else "spatial"


def subspace_records(net: TimeSformer) -> list[dict[str, Any]]:
    """One record per DnA attention module, head and pair (``v``: V+ / V-, ``q``: Q+ / Q-):
    ``module, layer, kind, head, pair, angles_deg, mean_deg, min_deg, frobenius,
    frobenius_abs, alpha, convention``. Empty for a softmax model."""
    records = []
    for name, module in _dna_modules(net).items():
        layer, kind = _where(name)
        weights = _projections(module)
        alpha = _alpha(module)
        h = module.num_heads
        for pair in ("v", "q"):
            positive, negative = head_blocks(weights[f"{pair}_pos"], h), head_blocks(weights[f"{pair}_neg"], h)
            for head in range(h):
                records.append({
                    "module": name, "layer": layer, "kind": kind, "head": head, "pair": pair,
                    **pair_measures(positive[head], negative[head]), "alpha": float(alpha[head]),
                    "convention": CONVENTION,
                })
    return records


def intruder_dimensions(new: Tensor, reference: Tensor, k: int = 10, epsilon: float = 0.5) -> dict[str, Any]:
    """Intruder dimensions of matrix ``new`` against ``reference`` (same shape): of the top
    ``k`` left singular vectors of ``new`` (by singular value), those whose largest |cosine|
    to any left singular vector of ``reference`` is below ``epsilon``.

    Returns ``intruders`` (count), ``indices`` (ranks among the top k) and ``max_cos`` per
    vector."""
    if new.shape != reference.shape:
        raise ValueError(f"shapes differ: {tuple(new.shape)} vs {tuple(reference.shape)}")
    u_new = torch.linalg.svd(new.double(), full_matrices=False).U[:, :k]
    u_ref = torch.linalg.svd(reference.double(), full_matrices=False).U
    # Singular vectors are unit vectors: cosines are inner products.
    max_cos = (u_new.T @ u_ref).abs().amax(dim=1)
    indices = [int(i) for i in torch.nonzero(max_cos < epsilon).flatten()]
    return {"intruders": len(indices), "indices": indices, "max_cos": [float(c) for c in max_cos]}


def intruder_records(net: TimeSformer, reference: TimeSformer, k: int = 10, epsilon: float = 0.5) -> list[dict[str, Any]]:
    """Intruder dimensions of every DnA projection (Q+, V+, Q-, V-) of ``net`` against the same
    matrix of ``reference``: ``module, layer, kind, matrix, intruders, indices, max_cos, k,
    epsilon``. A matrix the reference lacks (a softmax reference has no Q-, V-) is skipped."""
    ref_modules = reference.attention_modules()
    records = []
    for name, module in _dna_modules(net).items():
        layer, kind = _where(name)
        ref = ref_modules.get(name)
        if ref is None:
            continue
        ref_weights = _projections(ref)
        for matrix, weight in _projections(module).items():
            if matrix in ref_weights:
                records.append({
                    "module": name, "layer": layer, "kind": kind, "matrix": matrix,
                    **intruder_dimensions(weight, ref_weights[matrix], k, epsilon), "k": k, "epsilon": epsilon,
                })
    return records


FIGURES = ("mean_deg", "min_deg", "frobenius", "frobenius_abs", "alpha")


def compare_records(records: list[dict[str, Any]], reference: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``records`` with, for each one the reference also has (same module, head and pair),
    ``reference`` (its figures) and ``change`` (ours minus the reference's)."""
    ref = {(r["module"], r["head"], r["pair"]): r for r in reference}
    out = []
    for r in records:
        other = ref.get((r["module"], r["head"], r["pair"]))
        if other is not None:
            r = {**r, "reference": {f: other[f] for f in FIGURES},
                 "change": {f: r[f] - other[f] for f in FIGURES}}
        out.append(r)
    return out
