"""``bench speed`` forcer of ACT: ponder steps per token.  The dense encoder becomes a Universal
Transformer with ACT (one shared block — the dense model's first block's shape, new random weights — its
embedding and head kept), with at most L steps, L the dense model's depth, so that f = 1 runs as many
block applications per token as the dense model.  Each token ponders 1 + Binomial(L − 1, (f·L − 1)/(L − 1))
steps (mean f·L), the halting rule replaced (``ACTEncoder.force_steps``); the halting unit still runs.
Real path: at every step only the running tokens are computed.  MACs per sample from the logged steps
(``ACTEncoder.sample_macs``); executed fraction = mean steps / L.
"""

from __future__ import annotations

from bench.speed import Forcer, SpeedBackbone, counts
from methods.act import model as M


class ACTForcer(Forcer):
    decisions = "ponder steps per token"

    def supports(self, backbone: SpeedBackbone) -> str | None:
        if "encoder-decoder" in backbone.capabilities or not backbone.classes:
            return "ACT here ponders the tokens of an encoder with a pooled head (its class token)"
        return None

    def convert(self, dense, backbone: SpeedBackbone):
        c = self.cfg
        model = M.ACTEncoder(dense.cfg, dense.embed, dense.head, epsilon=float(c.epsilon),
                             max_steps=len(dense.blocks), halt_bias_init=float(c.halt_bias_init))
        model.real_path = True
        return model

    def draw(self, model, fraction: float, batch: int, backbone: SpeedBackbone, generator):
        device = next(model.parameters()).device
        return counts((batch, backbone.tokens), model.max_steps, fraction, 1, generator).to(device)

    def apply(self, model, decisions) -> None:
        model.force_steps = decisions

    def executed_fraction(self, model, decisions) -> float:
        return float(decisions.double().mean()) / model.max_steps

    def sample_macs(self, model, inputs):
        return model.sample_macs()


FORCER = ACTForcer
