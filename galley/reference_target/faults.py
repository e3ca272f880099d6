"""The faults the reference target injects, and one POST's draw of them."""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class Faults:
    """What goes wrong, and how often. Rates are probabilities in 0..1, drawn independently per POST.

    ``retry_after`` is the Retry-After (whole seconds) sent with 429 and 503. ``hang_seconds``
    should exceed the client's timeout. ``seed`` makes the sequence of draws reproducible.
    """

    latency_ms: int = 0
    rate_429: float = 0.0
    rate_503: float = 0.0
    rate_500: float = 0.0
    rate_hang: float = 0.0
    hang_seconds: float = 30.0
    rate_drop: float = 0.0
    retry_after: int = 1
    fence_off: bool = False
    seed: int | None = None

    def __post_init__(self) -> None:
        for name in ("rate_429", "rate_503", "rate_500", "rate_hang", "rate_drop"):
            rate = getattr(self, name)
            if not 0.0 <= rate <= 1.0:
                raise ValueError(f"{name} must be a probability between 0 and 1, got {rate!r}")
        if self.latency_ms < 0 or self.hang_seconds < 0 or self.retry_after < 0:
            raise ValueError("latency_ms, hang_seconds and retry_after must not be negative")


@dataclass(frozen=True)
class Draw:
    """One POST's fault decisions, all drawn up front so the sequence depends only on the seed."""

    throttle: bool
    unavailable: bool
    error: bool
    hang: bool
    drop: bool


def draw_faults(rng: random.Random, faults: Faults) -> Draw:
    """One POST's draw: five values from `rng`, in this order, whatever the rates (so the sequence
    depends only on the seed), each compared with its rate."""
    values = [rng.random() for _ in range(5)]
    return Draw(
        throttle=values[0] < faults.rate_429,
        unavailable=values[1] < faults.rate_503,
        error=values[2] < faults.rate_500,
        hang=values[3] < faults.rate_hang,
        drop=values[4] < faults.rate_drop,
    )
