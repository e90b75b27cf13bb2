"""Method ``acm``: Adaptive Computation Modules (Wójcik et al.) — per-token learner counts in every MLP
and q/k/v/o projection of the task's dense transformer (registration only; no torch here)."""

from dataclasses import dataclass

from bench.params import param
from bench.recipes import Recipe
from bench.registry import MethodSpec, register_method, requires_backbone


@dataclass
class ACMConfig:
    beta_target: float = param(0.6, min=0.01, max=1.0,
                               help="target fraction of learner compute (training-time knob: one stage-3 run "
                                    "per value; the paper's points 0.25/0.4/0.6/0.75; 0.6 = its Fig. 6 model)")
    n_learners: int = param(4, min=1, max=64, help="learners N per ACM (paper: 4)")
    modules: str = param("all", choices=["all", "mlp"],
                         help="all: every MLP and q/k/v/o projection (the paper's ViT); mlp: MLPs only "
                              "(its speech setting)")
    gate_hidden: int = param(0, min=0, help="gate hidden width; 0 = auto: the paper's rule, gates ~1% of the "
                                            "replaced modules' MACs (18 on ViT-B, 2 at d=64); acm-code: 16")
    gate_activation: str = param("gelu", choices=["gelu", "none"],
                                 help="between the gate's 3 Linears: gelu (the paper's 'two-layer network') or "
                                      "none (acm-code: purely linear)")
    keep_output_bias: bool = param(False, help="keep the replaced module's output bias as an always-added bias "
                                               "(paper: learners have no output bias -> False)")
    distill_mode: str = param("no_detach", choices=["no_detach", "detach"],
                              help="stage 1 gradient flow: no_detach = the paper's eq. (MSE of every prefix "
                                   "sum trains all its learners); detach = what acm-code actually runs (learner "
                                   "n fit greedily to the residual of learners < n)")
    gate_tau: float = param(0.8333, min=0.0, max=1.0,
                            help="stage 2 label: smallest n in 2..N with d(n)/d(n-1) >= tau, else N "
                                 "(acm-code: d(n-1)/d(n) < 1.2)")
    temperature: float = param(0.8, min=1e-3, help="Gumbel-softmax temperature in stage 3 (acm-code: 0.8)")
    gate_grad: str = param("straight_through", choices=["straight_through", "none"],
                           help="straight_through: output = sum_k nu_k h(z,k) with the ST one-hot, the task "
                                "loss trains the gates (paper); none: hard path, gates learn from the "
                                "auxiliary losses only (acm-code)")
    alpha_b: float = param(0.1, min=0.0, help="weight of the budget loss L_b")
    alpha_e: float = param(0.05, min=0.0, help="weight of the within-image entropy loss L_e")
    alpha_d: float = param(0.05, min=0.0, help="weight of the across-image diversity loss L_d")
    min_distill_steps: int = param(400, min=1,
                                   help="floor on stage-1 steps (capped at 20% of the budget), taken from stage 3; "
                                        "the split is otherwise 2/1/97 of the budget")
    min_gate_steps: int = param(100, min=1, help="floor on stage-2 steps (capped at 5% of the budget)")
    lr_distill: float = param(3e-3, min=0.0, help="Adam lr of stage 1 (paper: 1e-3 over 2 ImageNet epochs; 3e-3 "
                                                  "for the short offline budget, see method.py)")
    lr_gate: float = param(1e-2, min=0.0, help="Adam lr of stage 2 (paper: 1e-2)")
    lr_e2e: float = param(3e-3, min=0.0, help="Adam lr of stage 3 (paper: 1e-4 at batch 512 over 97 ImageNet "
                                              "epochs: use that for ViT-B; 3e-3 for the short offline budget, "
                                              "see method.py)")


def paper_recipe(capabilities: tuple[str, ...], base_steps: int) -> Recipe:
    """From the pre-trained model, 100 conversion epochs on top of a ViT-B trained for 300 (§Computer Vision:
    1/3 of the base's training), split 2 / 1 / 97 between the stages; speech splits its epochs 5 / 1 / 4
    (§Speech-to-Text), on the same fraction of this harness's base."""
    if "audio" in capabilities:
        return Recipe("base", 1 / 3, (("distill", 5), ("gates", 1), ("e2e", 4)),
                      "§Speech-to-Text: 5/1/4 epochs; the vision budget's fraction")
    return Recipe("base", 1 / 3, (("distill", 2), ("gates", 1), ("e2e", 97)),
                  "§Computer Vision: 100 epochs on a 300-epoch ViT-B, 2/1/97")


SPEC = register_method(MethodSpec(
    name="acm",
    config=ACMConfig,
    impl="methods.acm.method:ACMMethod",
    claims="methods.acm.claims:CLAIMS",
    speed="methods.acm.speed:FORCER",
    description="Adaptive Computation Modules: N prefix learners + gate per MLP/projection; distill, gate "
                "pre-training, end-to-end with budget/entropy/diversity losses",
    knob="beta_target",
    knob_kind="train",
    support=requires_backbone(("encoder", "encoder-decoder"),
                              "ACM replaces transformer MLPs/projections; this task's backbone has none"),
    test_overrides=("acm.min_distill_steps=2", "acm.min_gate_steps=2"),
    figures="methods.acm.figures:figures",
    paper_recipe=paper_recipe,
    kernels="methods.acm.kernels.bench",
    kernel_page="methods.acm.kernels.page:kernel_page",
))
