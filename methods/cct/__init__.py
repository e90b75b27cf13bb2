"""Method ``cct``: Conditional Computation Transformer (Bapna et al.) — per-token gates on K/V, on the whole
attention sublayer and on M FFN slices, steered by a budget symbol; one model for every budget
(registration only; no torch here)."""

from dataclasses import dataclass
from typing import List

from bench.params import param
from bench.recipes import Recipe
from bench.registry import MethodSpec, register_method


@dataclass
class CCTConfig:
    budgets: List[float] = param([1.0, 1.0, 1.0, 0.5, 0.33, 0.2], min=0.01, max=1.0,
                                 help="training budgets p (a sample draws one uniformly; repeats weight a value, "
                                      "the paper repeats 1.0 three times); every distinct value is one "
                                      "evaluation point of the same model (eval-time knob)")
    slices: int = param(4, min=1, max=64, help="M independently gated FFN slices (paper: 4)")
    gate_hidden: int = param(64, min=1, help="hidden units of each control network G = ReLU(xW1+b)W2 "
                                             "(paper: 64-256 made little difference at d=512-1024; 64, the "
                                             "smallest it tested, keeps the counted control cost lowest)")
    dropout: float = param(0.1, min=0.0, max=0.9, help="probability of every dropout while training (input, "
                                                       "attention probabilities, each gated unit's normalised "
                                                       "output: Eq. 13's Dropout(LN(a))); paper: 0.1")
    alpha_max: float = param(5.0, min=0.0, help="gate-noise scale alpha, raised linearly from 0 to this "
                                                "over training (paper: 5)")
    budget_weight: float = param(1.0, min=0.0, help="lambda of the budget loss sum_i |C_budget - C_util| / "
                                                    "C_budget over the budget groups (paper: 1.0 on WMT)")
    gate_bias_init: float = param(3.0, min=-20.0, max=20.0,
                                  help="initial output bias of the control networks (3: every unit starts "
                                       "on, so training starts from the dense model's function)")
    lr: float = param(0.0, min=0.0, help="learning rate (0 = the task's)")
    pairs: str = param("diagonal", choices=["diagonal", "decoder", "cross"],
                       help="encoder-decoder tasks: the (encoder, decoder) budget points evaluated on the one "
                            "model: diagonal = (p, p), decoder = (1, p), cross = every pair of distinct "
                            "budgets; training always draws the two budgets independently (the paper's "
                            "cross product)")


def _support(task, task_cfg):
    """CCT is implemented for encoders over image patches and for the encoder-decoder (the paper's tasks)."""
    capabilities = set(task.backbones(task_cfg))
    if "encoder-decoder" in capabilities or {"encoder", "image-patches"} <= capabilities:
        return None
    return ("CCT is implemented for encoders over image patches and for the encoder-decoder; this task "
            "provides neither (parity is not a natural fit, reference notes §6.6; padded encoder-only "
            "sequences are not supported yet)")


def paper_recipe(capabilities: tuple[str, ...], base_steps: int) -> Recipe:
    """From scratch, with the same schedule as the static baselines (§4): the base's budget."""
    return Recipe("scratch", 1.0, (), "§4: trained from scratch with the baselines' hyper-parameters")


SPEC = register_method(MethodSpec(
    name="cct",
    config=CCTConfig,
    impl="methods.cct.method:CCT",
    claims="methods.cct.claims:CLAIMS",
    speed="methods.cct.speed:FORCER",
    description="Conditional Computation Transformer: noisy sigmoid gates (alpha 0->5) on K/V, attention "
                "and M FFN slices with extra LayerNorms, budget-symbol embedding, two-sided group budget loss; "
                "inference runs a unit iff g >= 0.5 (gathered rows, zero K/V rows)",
    knob="budget",
    knob_kind="eval",
    support=_support,
    test_overrides=("cct.gate_hidden=4",),
    eval_examples=("cct.pairs=decoder",),
    figures="methods.cct.figures:draw",
    paper_recipe=paper_recipe,
))
