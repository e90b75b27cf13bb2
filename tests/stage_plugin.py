"""A method written only as declared stages, registered as a plugin would be (tests/test_stages.py).

``headtune`` fine-tunes the head of the task's dense base model with input noise drawn from the stage's
generator.  It has no build(), no budget, seeding, caching or data-order code: the core provides those."""

from __future__ import annotations

from dataclasses import dataclass

from bench.params import param
from bench.registry import MethodSpec, register_method, requires_backbone


@dataclass
class HeadTuneConfig:
    lr: float = param(1e-2, min=0.0, help="Adam lr of the head stage")
    noise: float = param(0.1, min=0.0, help="input noise scale during training (from the step's generator)")


register_method(MethodSpec(
    name="headtune", config=HeadTuneConfig, impl="tests.stage_plugin_impl:HeadTune",
    description="fine-tunes the dense base model's head (a stages-only test method)", knob="lr", knob_kind="train",
    support=requires_backbone("encoder", "needs the shared encoder"),
))
