"""``bench speed`` forcer of A-ViT: tokens kept per layer.  Every token gets a depth (the blocks it runs)
drawn as 1 + Binomial(L − 1, (f·L − 1)/(L − 1)) (mean f·L; a token always runs its first block), and
the halting scores, still computed, are replaced by 1 at that block (``AViTEncoder.force_depth``), so the
token halts there with weight 1.  Real path: at every block only the active tokens run.  MACs per sample
from the logged active counts (``AViTEncoder.sample_macs``); executed fraction = mean depth / L.
"""

from __future__ import annotations

from bench.speed import Forcer, SpeedBackbone, counts
from methods.avit import model as M


class AViTForcer(Forcer):
    decisions = "tokens kept per layer (a random depth per token)"

    def supports(self, backbone: SpeedBackbone) -> str | None:
        if "encoder-decoder" in backbone.capabilities:
            return "A-ViT halts the tokens of an encoder-only transformer"
        return None

    def convert(self, dense, backbone: SpeedBackbone):
        c = self.cfg
        model = M.AViTEncoder(dense, float(c.gate_scale), float(c.gate_center), float(c.epsilon))
        model.per_token = "token-outputs" in backbone.capabilities
        model.real_path = True
        return model

    def draw(self, model, fraction: float, batch: int, backbone: SpeedBackbone, generator):
        layers = len(model.encoder.blocks)
        device = next(model.parameters()).device
        return counts((batch, backbone.tokens), layers, fraction, 1, generator).to(device)

    def apply(self, model, decisions) -> None:
        model.force_depth = decisions

    def executed_fraction(self, model, decisions) -> float:
        return float(decisions.double().mean()) / len(model.encoder.blocks)

    def sample_macs(self, model, inputs):
        return model.sample_macs()


FORCER = AViTForcer
