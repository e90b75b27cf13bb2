"""Method ``act``: Adaptive Computation Time (Graves 2016), on an RNN cell or a shared transformer block."""

from dataclasses import dataclass

from bench.params import param
from bench.recipes import Recipe
from bench.registry import MethodSpec, register_method


@dataclass
class ActConfig:
    tau: float = param(1e-3, min=0.0, help="ponder-cost weight τ (training-time knob: one run per value)")
    epsilon: float = param(0.01, min=0.0, max=0.5, help="halt once the halting sum reaches 1 - ε")
    max_steps: int = param(0, min=0, max=1000,
                           help="cap M on ponder steps; 0 = the recipe's: Graves' M = 100 on the RNN cell (the "
                                "paper's setting), 20 on a shared transformer block (the Universal Transformer "
                                "baseline, not in Graves' paper)")
    lr: float = param(0.0, min=0.0,
                      help="Adam learning rate; 0 = the recipe's: Graves' 1e-4 on the RNN cell (the paper's "
                           "setting), the task's base rate on a shared transformer block (trained like the dense "
                           "model it is compared with)")
    halt_bias_init: float = param(1.0, help="initial bias of the halting unit (Graves: 1)")


def _support(task, task_cfg):
    backbones = set(task.backbones(task_cfg))
    if "token-outputs" in backbones:
        return ("ACT's encoder ponders a shared block and reads the class token; tasks that read every "
                "token's output (e.g. CTC) are not implemented")
    if backbones & {"rnn", "encoder"}:
        return None
    return ("ACT needs a recurrent cell or an encoder whose shared block can be pondered (not implemented for "
            "an encoder-decoder's decoding steps)")


def paper_recipe(capabilities: tuple[str, ...], base_steps: int) -> Recipe:
    """From scratch (Graves 2016 §3.1).  Graves trains parity for about a thousand times the samples this
    harness can afford; until the learning curve shows where it converges, the base's budget."""
    return Recipe("scratch", 1.0, (), "Graves 2016 §3.1; about 10^3 x longer there")


SPEC = register_method(MethodSpec(
    name="act",
    config=ActConfig,
    impl="methods.act.method:ACT",
    claims="methods.act.claims:CLAIMS",
    speed="methods.act.speed:FORCER",
    description="Adaptive Computation Time: sigmoid halting, remainder R, ponder cost N+R, mean-field state",
    knob="tau",
    knob_kind="train",
    support=_support,
    test_overrides=("act.max_steps=6", "act.tau=0.01"),
    paper_recipe=paper_recipe,
))
