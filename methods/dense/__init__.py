"""Method ``dense``: the task's backbone at one fixed size; smaller/larger sizes are static baselines."""

from dataclasses import dataclass

from bench.params import param
from bench.registry import MethodSpec, register_method


@dataclass
class DenseConfig:
    width: float = param(1.0, min=0.05, max=8.0, help="multiplier of the backbone width (1 = base model)")
    depth: float = param(1.0, min=0.05, max=8.0, help="multiplier of the backbone depth (1 = base model)")


SPEC = register_method(MethodSpec(
    name="dense",
    config=DenseConfig,
    impl="methods.dense.method:Dense",
    description="the dense backbone (width=depth=1 is the shared base model); other sizes are static points",
    knob="size",
    knob_kind="static",
))
