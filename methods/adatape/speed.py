"""``bench speed`` forcer of AdaTape: the tape length per sample.  The dense ViT gets AdaTape's tape after
block 1, read from an input-driven bank of finer patches (``adatape.bank_patch``, the method's default
bank); each sample reads 1 + Binomial(T − 1, (f·T − 1)/(T − 1)) tape tokens (mean f·T), the halting rule
replaced (``AdaTapeModel.force_length``; every reading step still runs).  Real path: samples grouped by
tape length, each group at its exact length.  MACs per sample from the logged lengths
(``AdaTapeModel.sample_macs``); executed fraction = mean tape length / T.  AdaTape adds tokens, so its
MACs exceed the dense model's: the forced fraction moves its cost above dense, not below.
"""

from __future__ import annotations

from bench.speed import Forcer, SpeedBackbone, counts
from methods.adatape import atr as atr_module
from methods.adatape import model as M


class AdaTapeForcer(Forcer):
    decisions = "tape tokens per sample"

    def supports(self, backbone: SpeedBackbone) -> str | None:
        if "image-patches" not in backbone.capabilities:
            return "AdaTape's input-driven bank here reads image patches"
        return None

    def convert(self, dense, backbone: SpeedBackbone):
        c = self.cfg
        vit, cfg = dense.vit, dense.cfg
        k = atr_module.k_per_step(int(c.max_tape), float(c.tau))
        settings = M.TapeSettings(max_tape=int(c.max_tape), tau=float(c.tau), k=k, key_dim=cfg.d_model // cfg.n_heads,
                                  complex_query=bool(c.complex_query))
        bank = M.PatchBank(vit.image_size, int(c.bank_patch), vit.channels, cfg.d_model)
        model = M.AdaTapeModel(cfg, dense.embed, bank, dense.blocks, dense.norm, dense.head, settings)
        model.real_path = True
        return model

    def draw(self, model, fraction: float, batch: int, backbone: SpeedBackbone, generator):
        device = next(model.parameters()).device
        return counts((batch,), model.settings.max_tape, fraction, 1, generator).to(device)

    def apply(self, model, decisions) -> None:
        model.force_length = decisions

    def executed_fraction(self, model, decisions) -> float:
        return float(decisions.double().mean()) / model.settings.max_tape

    def sample_macs(self, model, inputs):
        return model.sample_macs(model.last.length, model.last_inputs)


FORCER = AdaTapeForcer
