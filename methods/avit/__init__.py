"""Method ``avit``: A-ViT (Yin et al. 2022), adaptive per-token halting with real token removal, fine-tuned
from the task's dense encoder (registration only; no torch here)."""

from dataclasses import dataclass

from bench.params import param
from bench.recipes import Recipe
from bench.registry import MethodSpec, register_method, requires_backbone


@dataclass
class AViTConfig:
    sweep: str = param("ponder_weight", choices=["ponder_weight", "target"],
                       help="the training-time knob, one run per value: target = the ACM code's A-ViT protocol "
                            "(the prior's target depth avit.target swept; with avit.ponder_weight=5e-4 and "
                            "avit.distr_weight=1.0 the row is labelled 'ACM protocol'); ponder_weight = "
                            "avit.ponder_weight swept at a fixed target (the harness's variant, the committed "
                            "rows' protocol)")
    target: int = param(8, min=1, max=12,
                        help="target depth of the halting prior in blocks of a 12-block ViT, scaled to the "
                             "model's depth L: the prior's mean is target/12 * L (ACM code: 4, 6, 8, 10 of 12; "
                             "8 = A-ViT's default 2/3 of the depth, the harness's fixed target before)")
    ponder_weight: float = param(0.03, min=0.0,
                                 help="weight alpha_p of the ponder loss mean(N + R) (ACM code and A-ViT README: "
                                      "5e-4 on 12 blocks; the knob with sweep=ponder_weight: on the 4-block "
                                      "offline ViT 0.01..0.3 spans about 70%..30% of the dense cost)")
    distr_weight: float = param(0.1, min=0.0,
                                help="weight alpha_d of KL(prior || per-layer halting distribution) (ACM code: "
                                     "1.0; A-ViT README: 1e-3 on DeiT-T)")
    gate_scale: float = param(10.0, min=0.0, help="gamma in h = sigmoid(gamma * e_0 - beta) (A-ViT README: 10)")
    gate_center: float = param(30.0, help="beta in h = sigmoid(gamma * e_0 - beta) (A-ViT README: 30 on DeiT-T)")
    halt_init: float = param(0.1, min=0.0, max=0.5,
                             help="before fine-tuning, shift the output-dim-0 bias of every block's fc2 (but the "
                                  "last) so the median halting score at that layer is this (0 = no shift: the "
                                  "original's effective init, whose dead-code re-init never runs)")
    epsilon: float = param(0.01, min=0.0, max=0.99, help="a token halts once its cumulative score >= 1 - epsilon")
    eval_epsilons: list = param([], min=0.0, max=0.99,
                                help="extra eval-time halting thresholds 1 - eps on the same model (rows labelled "
                                     "'eval-eps' in the variant; a harness extension, not the paper's protocol)")
    lr: float = param(5e-4, min=0.0, help="Adam lr of the fine-tuning (A-ViT-T README: 5e-4)")


def paper_recipe(capabilities: tuple[str, ...], base_steps: int) -> Recipe:
    """The ACM paper's A-ViT baseline: 100 epochs on the pre-trained ViT-B, 1/3 of its 300 (§Computer Vision)."""
    return Recipe("base", 1 / 3, (), "ACM paper §Computer Vision: 100 epochs on a 300-epoch ViT-B")


SPEC = register_method(MethodSpec(
    name="avit",
    config=AViTConfig,
    impl="methods.avit.method:AViT",
    speed="methods.avit.speed:FORCER",
    description="A-ViT: per-token halting from embedding dim 0 (ACT per token), ponder + distribution-prior "
                "losses; halted tokens are gathered out of attention and MLP; knob: the prior's target depth "
                "(ACM protocol) or the ponder weight",
    knob="halting",
    knob_kind="train",
    support=requires_backbone("encoder", "A-ViT halts the tokens of an encoder-only transformer; this task configuration "
                                         "builds none (an RNN, or an encoder-decoder: not implemented)"),
    test_overrides=("avit.eval_epsilons=[0.5]", "avit.halt_init=0.3"),
    eval_examples=("avit.eval_epsilons=[0.2]",),
    figures="methods.avit.figures:figures",
    paper_recipe=paper_recipe,
))
