"""The denoising experiment (``python -m experiments.denoising``): does DnA resist a misleading
motion cue? Design: :mod:`.design`; plan: ``experiments/denoising_plan.yaml``; runs: :mod:`.runs`;
measures: :mod:`.measure`; report: :mod:`.report`; command line: :mod:`.cli`."""
