"""Tools to study DnA: evaluation reports, attention maps, subspace analysis."""
