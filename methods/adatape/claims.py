"""AdaTape's paper claim on parity (Xue et al. 2023), evaluated by ``bench report`` into reports/claims.md.

Tested on the sequence form of parity (AdaTape's), where the dense model is a vanilla Transformer and ACT
on the shared block is the Universal Transformer with ACT halting.
"""

from bench.claims import Claim, Reaches, Select

CLAIMS = [
    Claim(
        id="adatape-parity",
        source="Xue et al. 2023, AdaTape, parity",
        statement="AdaTape solves parity, where a standard Transformer and a Universal Transformer fail.",
        task="parity",
        dataset="parity-sequence",
        checks=(
            # the paper's input only (a single trainable token; the tape is the only way to the input): rows of
            # the projection ablation, or made before the input was declared, do not test tape reading
            Reaches(Select("adatape", label="AdaTape (paper input, no eval cap)", variant_has="input=token",
                           variant_not="eval-cap"), 0.99,
                    quantifier="any", title="AdaTape solves parity (accuracy ≥ 0.99 at some tape setting)"),
            # the full-size dense model at any budget: on the sequence form its steps differ from the task's
            # default (the dense variant then names the budget), and every such run should fail
            Reaches(Select("dense", label="vanilla Transformer", knob="w1-d1"), 0.6, fails=True,
                    title="the vanilla Transformer fails (accuracy < 0.6; chance 0.5)"),
            Reaches(Select("act", label="Universal Transformer (ACT)"), 0.6, fails=True,
                    title="the Universal Transformer fails (accuracy < 0.6)"),
        ),
        note=("Only rows with the paper's input (adatape.input=token: one trainable token, the input read through "
              "the tape alone) count for AdaTape; the projection ablation's query sees the whole sequence. "
              "Eval-time tape caps (a harness extension, not in the paper) are left out of the AdaTape selection. "
              "The points were trained on the sequence form at n = 16 with parity.train_steps=2000 (every model "
              "here, dense and ACT included; the task's default budget is for the vector form), as each row's "
              "`command` records."),
    ),
]
