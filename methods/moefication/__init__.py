"""Method ``moefication``: MoEfication (Zhang et al. 2021) as ACM's baseline (registration only).

Relufy the dense base model and fine-tune it, split every MLP into E equal experts (by default of about
24 neurons each, the ACM code's expert size) with balanced k-means over its neurons, train one router per
MLP on the frozen model, and run binary top-k experts per token at inference; k is swept at evaluation
time on the one model.
"""

from dataclasses import dataclass

from bench.params import param
from bench.recipes import Recipe
from bench.registry import MethodSpec, register_method, requires_backbone


@dataclass
class MoeficationConfig:
    experts: int = param(0, min=0, help="experts E per MLP (d_mlp must be divisible by E); 0 = the expert-size "
                                        "rule: the divisor of d_mlp nearest to d_mlp/expert_size (the ACM "
                                        "code's 128 experts of 24 neurons on ViT-B; 8 x 32 at the offline "
                                        "imagenet ViT's 256, 32 x 24 at commonvoice's 768, 16 x 32 at iwslt's 512)")
    expert_size: int = param(24, min=1, help="neurons per expert that experts=0 aims at (ACM code: 3072/128 = 24)")
    k_values: list = param([], min=1,
                           help="experts per token evaluated (eval-time knob); k=E is always added; [] = the "
                                "harness's grid at E = 8, [1, 2, 4, 6, 8], as shares of E: E/8, E/4, E/2, 3E/4 "
                                "(rounded, at least 1)")
    relu_fraction: float = param(0.8, min=0.0, max=1.0,
                                 help="share of the method budget spent fine-tuning the relufied model "
                                      "(ACM: 80 of 100 epochs); the rest trains the routers")
    relu_lr: float = param(1e-4, min=0.0, help="lr of relufication (ACM's ViT-B: Adam 1e-4); the task's "
                                                          "weight decay/clipping apply")
    router_lr: float = param(1e-3, min=0.0, help="Adam lr of router training (acm-code)")
    router_hidden: int = param(0, min=0, help="router width h of Linear(d,h) → tanh → Linear(h,E); 0 = auto: "
                                              "max(E, round(128·d/768)), acm-code's 128 at ViT-B's d=768 "
                                              "scaled to the model width (128 for ViT-B)")
    kmeans_iters: int = param(30, min=1, help="max Lloyd iterations of the balanced k-means")


def paper_recipe(capabilities: tuple[str, ...], base_steps: int) -> Recipe:
    """The ACM paper's MoEfication baseline: 100 epochs on the pre-trained ViT-B (1/3 of its 300), 80 of them
    relufication and 20 router training (§Computer Vision); speech 8 + 2 of 10 (§Speech-to-Text)."""
    return Recipe("base", 1 / 3, (("relu", 0.8), ("router", 0.2)),
                  "ACM paper §Computer Vision: 80 + 20 of 100 epochs on a 300-epoch ViT-B")


SPEC = register_method(MethodSpec(
    name="moefication",
    config=MoeficationConfig,
    impl="methods.moefication.method:Moefication",
    speed="methods.moefication.speed:FORCER",
    description="MoEfication: relufy + fine-tune, balanced k-means experts, MLP routers, binary top-k "
                "experts per token (grouped real path)",
    knob="k",
    knob_kind="eval",
    support=requires_backbone(("encoder", "encoder-decoder"),
                              "MoEfication splits the MLPs of the shared transformer; this task builds none"),
    test_overrides=("moefication.experts=4", "moefication.k_values=[1,2]", 
                    "moefication.kmeans_iters=10"),
    eval_examples=("moefication.k_values=[2]",),
    paper_recipe=paper_recipe,
))
