"""Method ``dense``: the task's backbone at one fixed size; smaller/larger sizes are static baselines."""

from dataclasses import dataclass

from bench.params import param
from bench.recipes import Recipe
from bench.registry import MethodSpec, register_method


@dataclass
class DenseConfig:
    width: float = param(1.0, min=0.05, max=8.0, help="multiplier of the backbone width (1 = base model)")
    depth: float = param(1.0, min=0.05, max=8.0, help="multiplier of the backbone depth (1 = base model)")


def paper_recipe(capabilities: tuple[str, ...], base_steps: int) -> Recipe:
    """The dense models train as the task's base model does, under either recipe."""
    return Recipe("", 1.0, (), "the task's base budget")


SPEC = register_method(MethodSpec(
    name="dense",
    config=DenseConfig,
    impl="methods.dense.method:Dense",
    description="the dense backbone (width=depth=1 is the shared base model); other sizes are static points",
    knob="size",
    knob_kind="static",
    paper_recipe=paper_recipe,
))
