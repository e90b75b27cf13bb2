"""Method ``dat``: the Depth-Adaptive Transformer (Elbayad et al. 2020), per-token decoder exits with a
classifier after every decoder block (registration only; no torch here)."""

from dataclasses import dataclass

from bench.params import param
from bench.recipes import Recipe
from bench.registry import MethodSpec, register_method, requires_backbone


@dataclass
class DATConfig:
    halting: str = param("geometric", choices=["geometric", "multinomial", "sequence", "confidence"],
                         help="geometric: token geometric-like χ_n > τ; multinomial: token N-way softmax after "
                              "block 1; sequence: N-way softmax on the mean encoder output; confidence: max "
                              "probability of classifier C_n > τ (no halting unit to train)")
    oracle: str = param("correctness", choices=["correctness", "likelihood"],
                        help="exit oracle q*: correctness (C) or likelihood (LL) of every classifier")
    lam: float = param(0.1, min=0.0, help="λ of the oracle argmax_n(score_n − λ·n) (training-time knob: larger "
                                          "→ lower exits; the paper's best Tok-C: 0.1)")
    sigma: float = param(0.0, min=0.0, help="RBF smoothing width σ of the oracle over time steps (0 = none)")
    alpha: float = param(1.0, min=0.0, help="weight α of the exit loss in L_dec + α·L_exit")
    aligned_fraction: float = param(0.5, min=0.0, max=1.0,
                                    help="share of the budget trained aligned with α = 0 (paper: 50k updates "
                                         "first); the rest trains with the exit loss")
    lr: float = param(1e-3, min=0.0, help="peak learning rate of both stages (cosine; task warm-up capped at 10%); "
                                          "recipe=paper: the exit stage only (the aligned model trains from "
                                          "scratch at the base's rate)")
    exit_budgets: list = param([1.5, 2.0, 3.0, 4.0], min=1.0,
                               help="eval-time knob (geometric/confidence): per value a, the per-block thresholds "
                                    "τ_1..τ_{N-1} of best validation BLEU among the tuned candidates whose "
                                    "validation average exit is <= a (the cheapest if none is); knob value ae<a>")
    tune_samples: int = param(64, min=0, help="threshold vectors drawn from U(0,1)^(N-1) and decoded on the "
                                              "validation split, besides 0.5 at every block (paper: 10k)")
    tune_sentences: int = param(200, min=0, help="validation sentences each candidate decodes (0 = the whole "
                                                 "validation split)")
    fixed_exits: list = param([1, 2, 3, 6], min=1,
                              help="also evaluate the aligned model with every token exiting at these blocks "
                                   "(values above N are dropped; [] = none)")


def paper_recipe(capabilities: tuple[str, ...], base_steps: int) -> Recipe:
    """From scratch: the aligned model as long as the full-depth baseline, then the halting mechanism "until
    convergence" (§4.1); here a further quarter of that budget (the learning curve says whether it has
    converged)."""
    return Recipe("scratch", 1.25, (("aligned", 0.8), ("exit", 0.2)),
                  "§4.1: aligned from scratch, then α ≠ 0 until convergence; here +25%")


SPEC = register_method(MethodSpec(
    name="dat",
    config=DATConfig,
    impl="methods.dat.method:DAT",
    claims="methods.dat.claims:CLAIMS",
    description="Depth-Adaptive Transformer: a classifier per decoder block, aligned training, exit loss "
                "against a likelihood/correctness oracle, token/sequence halting, copied states",
    knob="threshold",
    knob_kind="eval",
    support=requires_backbone("encoder-decoder", "DAT adapts the depth of a decoder; this task has no "
                                                 "encoder-decoder backbone"),
    test_overrides=("dat.exit_budgets=[1.5]", "dat.fixed_exits=[1]", "dat.tune_samples=3", "dat.tune_sentences=12"),
    eval_examples=("dat.exit_budgets=[2.5]", "dat.fixed_exits=[2]",),
    paper_recipe=paper_recipe,
))
