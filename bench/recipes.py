"""Training recipes as data (no torch here: ``bench ls`` lists them).

``recipe=matched`` (the default) trains every method on the core's equal budget (bench/protocol.py);
``recipe=paper`` trains it as its paper does, from the :class:`Recipe` its registration declares
(``MethodSpec.paper_recipe``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class Recipe:
    """A method's training recipe as its paper gives it (``recipe=paper``; ``recipe=matched`` is the core's
    equal budget for every method).

    ``starts_from``: "base" (the task's trained dense model, as the paper converts a pretrained one),
    "scratch" (the method's conversion of an untrained dense model, trained on this budget alone), or ""
    (where the method itself starts: the dense sizes).
    ``budget``: the method's optimizer steps as a fraction of the dense base model's training steps (the
    paper's own ratio, e.g. 100 conversion epochs on top of 300 pre-training epochs: 1/3).  ``shares``:
    stage name -> share where the paper splits the budget otherwise than the stages declare.  ``source``:
    where the paper states it (section, table), for ``bench ls`` and the method's README."""

    starts_from: Literal["base", "scratch", ""]
    budget: float
    shares: tuple[tuple[str, float], ...] = ()
    source: str = ""

    def share_of(self, stage: str, declared: float) -> float:
        """The share of a stage named ``stage`` (or ``<name>-<suffix>``, e.g. ``e2e-b0.6`` for ``e2e``)."""
        for name, share in self.shares:
            if stage == name or stage.startswith(name + "-"):
                return float(share)
        return declared

    def describe(self) -> str:
        split = "; split " + ", ".join(f"{name} {share:g}" for name, share in self.shares) if self.shares else ""
        start = {"base": "from the dense base", "scratch": "from scratch"}.get(self.starts_from, "as the method starts")
        return f"{start}, {self.budget:.3g} x the base's steps{split}" + (f" ({self.source})" if self.source else "")
