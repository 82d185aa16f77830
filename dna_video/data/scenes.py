"""The scenes of the synthetic datasets, drawn with numpy alone (no torch, no Lightning: a process
that only renders and encodes, like a dataset writer's worker, starts in a fraction of a second).

An "actor" shape whose motion or change over time defines the class, over a textured
background: :func:`render_video` adds one distractor on a random walk (the quickstart's videos,
:mod:`.synthetic`); :func:`render_scene` draws the actor with stripes of its own, distractors at a
chosen level and per-frame ground-truth masks (the denoising experiment's videos,
:mod:`.distractors`, which documents the levels). Both are deterministic from the per-video seed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np

__all__ = ["SYNTHETIC_CLASSES", "SOURCE_CLASSES", "CLASS_SETS", "DISTRACTOR_LEVELS", "class_names_of",
           "actor_track", "shape_mask", "scene_start", "render_video", "render_scene", "cue_motion", "cue_label_of"]

# Class names in label order. Names follow Smarthome's `Coarse.Fine` style (no `_`).
SYNTHETIC_CLASSES = ("Blink", "Change.Size", "Move.Circle", "Move.Line", "Stay")
# The source task's classes: other motions, none of the target's (pretraining without its labels).
SOURCE_CLASSES = ("Bounce", "Grow.Once", "Jump", "Move.Diagonal", "Move.Zigzag")
CLASS_SETS = {"target": SYNTHETIC_CLASSES, "source": SOURCE_CLASSES}
DISTRACTOR_LEVELS = ("none", "random", "confusing", "cue")


def class_names_of(classes: str) -> tuple[str, ...]:
    """The class names of class set ``classes`` (``target`` or ``source``), in label order."""
    if classes not in CLASS_SETS:
        raise ValueError(f"data.init_args.classes: unknown class set {classes!r}; use one of {sorted(CLASS_SETS)}")
    return CLASS_SETS[classes]


def shape_mask(kind: int, yy: np.ndarray, xx: np.ndarray, cy: float, cx: float, r: float) -> np.ndarray:
    """Pixels (bool, the shape of the grids ``yy``, ``xx``) of shape ``kind`` (0 disc, 1 square,
    2 triangle) of size ``r`` centred at (``cy``, ``cx``)."""
    dy, dx = yy - cy, xx - cx
    if kind == 0:  # disc
        return dy * dy + dx * dx <= r * r
    if kind == 1:  # square
        return (np.abs(dy) <= r * 0.85) & (np.abs(dx) <= r * 0.85)
    return (dy <= r * 0.7) & (np.abs(dx) <= (dy + r) * 0.6)  # triangle pointing up


def actor_track(label: int, t: np.ndarray, rng: np.random.Generator, h: int, w: int,
                 classes: Sequence[str] = SYNTHETIC_CLASSES):
    """Centre (y, x) and radius of the actor of class ``classes[label]`` at normalised times
    ``t`` in [0, 1].

    Everything happens near the centre, at a scale set by the frame height, so that a
    training crop (short-side jitter then a square crop) keeps the whole path in view while
    it still spans several patches. Directions and phases are random within a class (up or
    down, left or right, clockwise or not...), so no class can be told from one frame or
    from a flip."""
    r0 = rng.uniform(0.1, 0.13) * h
    cy0, cx0 = h / 2 + rng.uniform(-0.1, 0.1) * h, w / 2 + rng.uniform(-0.1, 0.1) * h
    cls = classes[label]
    r = np.full_like(t, r0)
    cy, cx = np.full_like(t, cy0), np.full_like(t, cx0)
    wobble = rng.normal(0, 1.0, t.shape).cumsum() * 0.1
    sign = rng.choice([-1.0, 1.0])
    cycles = rng.uniform(1.0, 1.5)
    wave = 0.5 * (1 - np.cos(2 * np.pi * cycles * t + rng.uniform(0, np.pi)))  # in [0, 1]
    if cls == "Blink":
        # In place, hidden (radius 0) for half of each period of 10 to 16 frames.
        period = rng.uniform(10, 16) / (len(t) - 1)
        r = np.where(((t / period + rng.uniform(0, 1)) % 1.0) < 0.5, r0, 0.0)
    elif cls == "Change.Size":
        small, large = rng.uniform(0.04, 0.05) * h, rng.uniform(0.22, 0.26) * h
        r = small + (large - small) * wave
    elif cls == "Move.Circle":
        turn = sign * 2 * np.pi * rng.uniform(0.8, 1.1)
        phase = rng.uniform(0, 2 * np.pi)
        rad = rng.uniform(0.2, 0.24) * h
        cy, cx = h / 2 + rad * np.sin(phase + turn * t), w / 2 + rad * np.cos(phase + turn * t)
    elif cls == "Move.Line":
        along = h / 2 + sign * rng.uniform(0.5, 0.6) * h * (t - 0.5)
        if rng.random() < 0.5:
            cy, cx = along, cx0 + wobble
        else:
            cy, cx = cy0 + wobble, along - h / 2 + w / 2
    elif cls == "Stay":
        cy, cx = cy0 + wobble, cx0 + wobble[::-1]
    # The source classes (drawn after the shared draws above, so the target's stay as they were).
    elif cls == "Bounce":
        # Arcs off a floor below the centre, 2 to 3 bounces, in place horizontally.
        bounces, rise = rng.uniform(2.0, 3.0), rng.uniform(0.3, 0.36) * h
        cy = h / 2 + 0.18 * h - rise * np.abs(np.sin(np.pi * bounces * t + rng.uniform(0, np.pi)))
        cx = cx0 + wobble
    elif cls == "Grow.Once":
        # From small to large once (smoothstep over 0.5 to 0.7 of the video), never back.
        small, large = rng.uniform(0.04, 0.05) * h, rng.uniform(0.22, 0.26) * h
        start, span = rng.uniform(0.05, 0.25), rng.uniform(0.5, 0.7)
        ramp = np.clip((t - start) / span, 0.0, 1.0)
        r = small + (large - small) * ramp * ramp * (3 - 2 * ramp)
        cy, cx = cy0 + wobble, cx0 + wobble[::-1]
    elif cls == "Jump":
        # Still, then from one frame to the next 0.3 to 0.4 of the height up, down, left or right.
        when, distance = rng.uniform(0.35, 0.65), rng.uniform(0.3, 0.4) * h
        dy, dx = ((1, 0), (-1, 0), (0, 1), (0, -1))[int(rng.integers(4))]
        jumped = np.where(t >= when, 0.5, -0.5) * distance
        cy, cx = h / 2 + dy * jumped + wobble, w / 2 + dx * jumped + wobble[::-1]
    elif cls == "Move.Diagonal":
        # Straight along one of the four diagonals.
        along = rng.uniform(0.4, 0.5) * h * (t - 0.5)
        cy, cx = h / 2 + rng.choice([-1.0, 1.0]) * along, w / 2 + sign * along
    elif cls == "Move.Zigzag":
        # Left or right with a vertical triangle wave (2 to 3 teeth of 0.12 to 0.15 of the height).
        along = sign * rng.uniform(0.5, 0.6) * h * (t - 0.5)
        teeth, amplitude = rng.uniform(2.0, 3.0), rng.uniform(0.12, 0.15) * h
        triangle = 4 * np.abs((teeth * t + rng.uniform(0, 1)) % 1.0 - 0.5) - 1  # in [-1, 1]
        cy, cx = h / 2 + amplitude * triangle, w / 2 + along
    else:
        raise ValueError(f"no motion for class {cls!r}")
    return cy, cx, r


def scene_start(rng: np.random.Generator, height: int, width: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The first draws of every synthetic video, in this order: its length, then its
    background (a random colour gradient with fixed texture noise). Returns normalised times
    ``t`` (N,), the pixel grids ``yy``, ``xx`` (H, W) and the background (H, W, 3) float."""
    n = int(rng.integers(40, 57))
    t = np.linspace(0.0, 1.0, n)
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
    c0, c1 = rng.uniform(0, 120, 3), rng.uniform(0, 120, 3)
    ramp = (xx / width * 0.6 + yy / height * 0.4)[..., None]
    background = c0 * (1 - ramp) + c1 * ramp + rng.normal(0, 8, (height, width, 3))
    return t, yy, xx, background


def render_video(label: int, seed: int, height: int = 84, width: int = 112, classes: str = "target") -> np.ndarray:
    """Frames (N, H, W, 3) uint8 of one synthetic video of class ``label`` of class set
    ``classes`` (``target`` or ``source``)."""
    rng = np.random.default_rng(seed)
    t, yy, xx, background = scene_start(rng, height, width)
    n = len(t)
    kind, distractor_kind = rng.integers(0, 3, 2)
    colour = rng.uniform(150, 255, 3)
    distractor_colour = rng.uniform(120, 255, 3)
    cy, cx, r = actor_track(label, t, rng, height, width, class_names_of(classes))
    # Distractor: a smaller shape on a smooth random walk, reflected at the borders.
    velocity = rng.normal(0, 1.0, (n, 2)).cumsum(0) * 0.2
    pos = np.array([rng.uniform(0.2, 0.8) * height, rng.uniform(0.2, 0.8) * width]) + velocity.cumsum(0)
    pos = np.abs((pos + [height, width]) % (2 * np.array([height, width])) - [height, width])
    d_radius = rng.uniform(0.05, 0.07) * height

    frames = np.empty((n, height, width, 3), np.uint8)
    for i in range(n):
        img = background.copy()
        img[shape_mask(distractor_kind, yy, xx, pos[i, 0], pos[i, 1], d_radius)] = distractor_colour
        if r[i] > 0:
            img[shape_mask(kind, yy, xx, cy[i], cx[i], r[i])] = colour
        frames[i] = np.clip(img, 0, 255).astype(np.uint8)
    return frames


def cue_motion(label: int, num_classes: int) -> int:
    """The class whose motion cues ``label``: pi(y) = (y + 1) mod C, a derangement (never y
    itself, so a cue-following model must read the cue's motion, not the actor's)."""
    return (label + 1) % num_classes


def cue_label_of(label: int, seed: int, cue_rate: float, num_classes: int) -> int:
    """The label the cue of video (``label``, ``seed``) points to: ``label`` with probability
    ``cue_rate``, else another label, uniformly. Drawn from the video's stream ``[seed, 3]``
    (both draws always made: the same video points to the same other label at any rate, and
    a video cue-faithful at a rate stays so at any higher rate)."""
    rng = np.random.default_rng([seed, 3])
    faithful = rng.random() < cue_rate
    other = int(rng.choice([c for c in range(num_classes) if c != label]))
    return label if faithful else other


def _stripes(yy: np.ndarray, xx: np.ndarray, period: float) -> np.ndarray:
    """True on the light half of diagonal stripes: the actor's own texture."""
    return ((yy + xx) / period) % 1.0 < 0.5


def render_scene(
    label: int,
    seed: int,
    level: Literal["none", "random", "confusing", "cue"] = "none",
    num_distractors: int = 1,
    distractor_size: float = 1.0,
    similarity: float = 0.5,
    height: int = 84,
    width: int = 112,
    cue_rate: float = 0.9,
    classes: str = "target",
) -> tuple[np.ndarray, np.ndarray]:
    """Frames (N, H, W, 3) uint8 and masks bool (N, 1 + K, H, W) of one video of class
    ``label`` of class set ``classes`` (K = 0 at level ``none``, 1 at level ``cue``)."""
    if level not in DISTRACTOR_LEVELS:
        raise ValueError(f"unknown distractor level {level!r}: use one of {DISTRACTOR_LEVELS}")
    if not 0.0 <= similarity <= 1.0:
        raise ValueError(f"similarity must be in [0, 1], got {similarity}")
    if not 0.0 <= cue_rate <= 1.0:
        raise ValueError(f"cue_rate must be in [0, 1], got {cue_rate}")
    if level == "cue" and num_distractors != 1:
        raise ValueError(f"level cue draws one distractor (the cue), got num_distractors={num_distractors}: set 1")
    names = class_names_of(classes)
    rng = np.random.default_rng(seed)
    t, yy, xx, background = scene_start(rng, height, width)
    n = len(t)
    kind = int(rng.integers(0, 3))
    # Two bright stripe colours: a dark stripe would vanish into the (dark) background.
    light, dark = rng.uniform(190, 255, 3), rng.uniform(120, 170, 3)
    stripe = _stripes(yy, xx, period=max(4.0, 0.16 * height))
    cy, cx, r = actor_track(label, t, rng, height, width, names)

    # The distractors' own stream: the actor and background above do not depend on the level.
    drng = np.random.default_rng([seed, 1])
    k = 0 if level == "none" else num_distractors
    tracks = []
    for _ in range(k):
        d_kind = kind if drng.random() < similarity else int(drng.choice([s for s in range(3) if s != kind]))
        colour = similarity * light + (1 - similarity) * drng.uniform(120, 255, 3)
        size = distractor_size * drng.uniform(0.1, 0.13) * height
        if level == "random":
            velocity = drng.normal(0, 1.0, (n, 2)).cumsum(0) * 0.2
            pos = np.array([drng.uniform(0.2, 0.8) * height, drng.uniform(0.2, 0.8) * width]) + velocity.cumsum(0)
            pos = np.abs((pos + [height, width]) % (2 * np.array([height, width])) - [height, width])
            dy, dx, dr = pos[:, 0], pos[:, 1], np.full(n, size)
        else:  # another class's motion (level cue: the cue's), beside the actor
            if level == "cue":
                other = cue_motion(cue_label_of(label, seed, cue_rate, len(names)), len(names))
            else:
                other = int(drng.choice([c for c in range(len(names)) if c != label]))
            dy, dx, dr = actor_track(other, t, drng, height, width, names)
            dr = dr * distractor_size
            side = drng.choice([-1.0, 1.0])
            dx = dx + side * drng.uniform(0.25, 0.35) * height
            dy = dy + drng.uniform(-0.1, 0.1) * height
        tracks.append((d_kind, colour, dy, dx, dr))

    frames = np.empty((n, height, width, 3), np.uint8)
    masks = np.zeros((n, 1 + k, height, width), bool)
    for i in range(n):
        img = background.copy()
        for j, (d_kind, colour, dy, dx, dr) in enumerate(tracks):
            if dr[i] <= 0:
                continue
            shape = shape_mask(d_kind, yy, xx, dy[i], dx[i], dr[i])
            img[shape] = colour
            masks[i, 1: 1 + j] &= ~shape  # a later distractor hides the earlier ones
            masks[i, 1 + j] = shape
        if r[i] > 0:
            actor = shape_mask(kind, yy, xx, cy[i], cx[i], r[i])
            img[actor & stripe] = light
            img[actor & ~stripe] = dark
            masks[i, 0] = actor
            masks[i, 1:] &= ~actor
        frames[i] = np.clip(img, 0, 255).astype(np.uint8)
    return frames, masks
