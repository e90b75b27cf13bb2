"""Method ``early_exit``: SDN internal classifiers with Zero Time Waste cascading and ensembling on the
task's dense encoder; a sample stops at the first exit whose confidence passes a threshold (registration
only; no torch here)."""

from dataclasses import dataclass

from bench.params import param
from bench.recipes import Recipe
from bench.registry import MethodSpec, register_method, requires_backbone


@dataclass
class EarlyExitConfig:
    thresholds: list = param([0.5, 0.7, 0.8, 0.9, 0.95, 0.98, 0.99, 0.995, 0.999, 1.0], min=0.0, max=1.0,
                             help="max-softmax confidence thresholds evaluated (eval-time knob, one model); a "
                                  "sample exits at the first exit with confidence > threshold; 1.0 never "
                                  "exits early (the full-depth model plus every head's cost)")
    exit_blocks: list = param([], min=0,
                              help="blocks followed by an internal classifier (0-based); [] = every block but "
                                   "the last (acm-code: blocks 0..10 of ViT-B), or block 0 of a 1-block encoder")
    head: str = param("cascading", choices=["cascading", "standard"],
                      help="cascading: ZTW head, the previous exit's detached LayerNormed logits join the last "
                           "Linear's input; standard: SDN head without that input")
    head_hidden: int = param(0, min=0,
                             help="width h of the 3-Linear head d -> h -> h -> classes; 0 = auto: the largest h "
                                  "whose head costs <= head_fraction of the dense model")
    head_fraction: float = param(0.0047, min=0.0, max=1.0,
                                 help="auto head width target: MACs of one head / dense MACs (ZTW's 8192-wide "
                                      "head on ViT-B: 83M / 17.56G = 0.47%)")
    ensemble: bool = param(True, help="ZTW ensembling: exit i uses a learned geometric ensemble of the "
                                      "exits 0..i (trained in a second stage)")
    backbone: str = param("frozen", choices=["frozen", "joint"],
                          help="frozen: only heads train (ZTW, acm-code 'without_backbone'); joint: SDN-style "
                               "joint training of backbone and heads with the mean CE over all exits")
    ensemble_fraction: float = param(0.05, min=0.0, max=0.5,
                                     help="share of the budget for the ensemble stage (acm-code: 5 of 100 epochs)")
    lr: float = param(1e-3, min=0.0, help="Adam lr of the head stage (acm-code: 1e-3)")
    lr_ensemble: float = param(1e-3, min=0.0, help="Adam lr of the ensemble stage (acm-code: 1e-3)")


def paper_recipe(capabilities: tuple[str, ...], base_steps: int) -> Recipe:
    """The ACM paper's early-exit baseline: 100 epochs on the pre-trained ViT-B (1/3 of its 300), the heads 95
    and the ensembles 5 (§Computer Vision)."""
    return Recipe("base", 1 / 3, (("heads", 0.95), ("ensembles", 0.05)),
                  "ACM paper §Computer Vision: 95 + 5 of 100 epochs on a 300-epoch ViT-B")


SPEC = register_method(MethodSpec(
    name="early_exit",
    config=EarlyExitConfig,
    impl="methods.early_exit.method:EarlyExit",
    speed="methods.early_exit.speed:FORCER",
    description="early exit: SDN internal classifiers after blocks, ZTW cascading heads and geometric "
                "ensembles, max-softmax threshold (exited samples leave the batch)",
    knob="threshold",
    knob_kind="eval",
    support=requires_backbone("encoder", "early exit puts classifier heads between the blocks of an encoder-only "
                                         "transformer; this task builds none (an RNN, or an encoder-decoder: DAT)"),
    test_overrides=("early_exit.thresholds=[0.0,0.5,1.0]",),
    eval_examples=("early_exit.thresholds=[0.3]",),
    figures="methods.early_exit.figures:depth_histogram",
    paper_recipe=paper_recipe,
))
