"""``bench speed`` forcer of early exit: the exit per sample.  Heads after every block but the last
(the method's default ``exit_blocks``; ZTW cascading heads of the auto width, ensembles on); each sample
runs 1 + Binomial(L − 1, (f·L − 1)/(L − 1)) blocks (mean f·L) and leaves at the head after its last
block (L blocks: the final head), replacing the confidence rule (``EarlyExitEncoder.force_exit``; every
head up to the exit still runs).  Exited samples leave the batch.  MACs per sample from the logged exit
(``EarlyExitEncoder.sample_macs``); executed fraction = mean blocks run / L.
"""

from __future__ import annotations

from bench.speed import Forcer, SpeedBackbone, counts
from methods.early_exit import model as M


class EarlyExitForcer(Forcer):
    decisions = "exit block per sample"

    def supports(self, backbone: SpeedBackbone) -> str | None:
        if "encoder-decoder" in backbone.capabilities or not backbone.classes:
            return "early exit here needs an encoder with a pooled classification head"
        return None

    def convert(self, dense, backbone: SpeedBackbone):
        c = self.cfg
        layers = len(dense.blocks)
        if list(c.exit_blocks) and sorted(int(b) for b in c.exit_blocks) != list(range(layers - 1)):
            raise ValueError("the speed forcer uses heads after every block but the last (exit_blocks=[])")
        dense_macs = dense.macs(backbone.tokens)
        d = dense.cfg.d_model
        hidden = int(c.head_hidden) or M.auto_hidden(d, backbone.classes, float(c.head_fraction) * dense_macs)
        model = M.EarlyExitEncoder(dense, list(range(layers - 1)), backbone.classes, hidden,
                                   cascade=c.head == "cascading")
        model.use_ensemble = bool(c.ensemble)
        return model

    def draw(self, model, fraction: float, batch: int, backbone: SpeedBackbone, generator):
        layers = len(model.encoder.blocks)
        device = next(model.parameters()).device
        return (counts((batch,), layers, fraction, 1, generator) - 1).to(device)  # exit index = last block

    def apply(self, model, decisions) -> None:
        model.force_exit = decisions

    def executed_fraction(self, model, decisions) -> float:
        return float((decisions + 1).double().mean()) / len(model.encoder.blocks)

    def sample_macs(self, model, inputs):
        return model.sample_macs()


FORCER = EarlyExitForcer
