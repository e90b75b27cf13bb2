"""Method ``adatape``: AdaTape (elastic input sequence) — Adaptive Tape Reading appends a per-sample number
of tape tokens, read from a tape bank, after encoder layer 1 (registration only; no torch here)."""

from dataclasses import dataclass
from typing import List

from bench.params import param
from bench.recipes import Recipe
from bench.registry import MethodSpec, register_method


@dataclass
class AdaTapeConfig:
    bank: str = param("input", choices=["input", "learnable"],
                      help="tape bank: input = built from the input (imagenet: a finer patching of the same "
                           "image; parity: the sequence elements), learnable = bank_size trainable vectors")
    input: str = param("token", choices=["token", "projection", "none"],
                       help="parity (sequence form) only: the model's one input token. token = a single trainable "
                            "token, the same for every input, so the tape is the only way to the input (the "
                            "paper's parity setup); projection = that token plus a Linear map of the whole "
                            "one-hot sequence (ablation: the query sees the input without the tape); none = the "
                            "single token and no tape (control: nothing of the input reaches the model)")
    max_tape: int = param(8, min=1, max=256, help="T: most tape tokens one sample can read (training-time knob)")
    tau: float = param(4.0, min=1e-3, help="halting threshold tau on the summed max selection weight; "
                                           "K = T/tau tokens are merged per step and must be an integer "
                                           "(training-time knob, one run per value)")
    eval_caps: List[int] = param([], help="extra evaluation points on the same model with T capped at these "
                                     "values (harness extension, labelled in the row's variant)")
    atr_weight: float = param(0.01, min=0.0, help="lambda of the ATR loss mean(sum_steps 1 - sum w^2) "
                                                  "(paper: 0.01 with the input bank; 0 is allowed with the "
                                                  "learnable one)")
    complex_query: bool = param(True, help="query update q <- (q + s)/2 (True) or q <- s (False)")
    bank_patch: int = param(4, min=1, help="imagenet, input bank: patch size of the finer patching "
                                           "(28 px / 4 = 49 bank tokens; the paper: 8 at 224 px = 784)")
    bank_size: int = param(256, min=2, help="learnable bank: number of vectors C (paper: 10,000 at ViT-B)")
    query_noise: float = param(0.01, min=0.0, help="learnable bank, training only: query noise std")
    bank_drop: float = param(0.1, min=0.0, max=0.9, help="learnable bank, training only: Bernoulli "
                                                         "probability of masking a bank entry")
    lr: float = param(0.0, min=0.0, help="learning rate (0 = the recipe's: on parity under recipe=paper the "
                                         "paper's 3e-5, after 1,000 warm-up steps; otherwise the task's)")


def _support(task, task_cfg):
    """AdaTape needs a bank its tape can read: the sequence's input bits, or the image's patches."""
    capabilities = set(task.backbones(task_cfg))
    if "encoder" in capabilities and capabilities & {"sequence-bits", "image-patches"}:
        return None
    return ("AdaTape appends tape tokens read from a bank of sequence elements or image patches; this task "
            "provides neither (parity: use parity.variant=sequence)")


def paper_recipe(capabilities: tuple[str, ...], base_steps: int) -> Recipe:
    """From scratch; on parity the paper's 10,000 steps at batch 128, on images the ViT's own schedule."""
    if "sequence-bits" in capabilities:
        return Recipe("scratch", 10_000 / base_steps, (), "the paper's parity setting: 10k steps x 128")
    return Recipe("scratch", 1.0, (), "trained from scratch like its ViT")


SPEC = register_method(MethodSpec(
    name="adatape",
    config=AdaTapeConfig,
    impl="methods.adatape.method:AdaTape",
    claims="methods.adatape.claims:CLAIMS",
    speed="methods.adatape.speed:FORCER",
    description="AdaTape: Adaptive Tape Reading after layer 1 (top-K merge per step, halting on summed max "
                "weight >= tau, K = T/tau), input-driven or learnable bank, exact per-sample tape lengths",
    knob="tape",
    knob_kind="train",
    support=_support,
    test_overrides=("adatape.max_tape=4", "adatape.tau=2.0", "adatape.eval_caps=[2]", "adatape.bank_size=16"),
    eval_examples=("adatape.eval_caps=[1]",),
    figures="methods.adatape.figures:draw",
    paper_recipe=paper_recipe,
))
