"""``bench speed`` forcer of ACM: learners per token, drawn at random with the target mean (ACM Fig. 9).

Conversion: ``acmize`` with the method's default settings (every MLP and q/k/v/o projection, N = 4, the
auto gate width).  At fraction f every ACM's gate runs for real on its input and its choice is replaced by
k drawn once per point (``ACM.force_k``): MLP ACMs k ~ Binomial(N, f); projection ACMs, which always run
one learner, k = 1 + Binomial(N − 1, (f·N − 1)/(N − 1)) (f·N ≥ 1; below that k = 1).  The executed
fraction is the cost-weighted learner fraction of the draws (``compute_fraction``); MACs per sample come
from the logged k (``sample_macs``; on an encoder-decoder, its cost ledger over the teacher-forced forward,
which charges every ACM's ``row_macs``).  Encoder and decoder here have the same length, so one draw
shape [B, T] fits every ACM, cross-attention K/V included.
"""

from __future__ import annotations

from bench.speed import Forcer, SpeedBackbone, counts, teacher_forced_macs
from methods.acm import modules as M


class ACMForcer(Forcer):
    decisions = "learners per token (every ACM)"

    def settings(self) -> M.ACMSettings:
        c = self.cfg
        return M.ACMSettings(n_learners=int(c.n_learners), modules=str(c.modules), gate_hidden=int(c.gate_hidden),
                             gate_activation=str(c.gate_activation), keep_output_bias=bool(c.keep_output_bias))

    def convert(self, dense, backbone: SpeedBackbone):
        M.acmize(dense, self.settings())
        return dense

    def draw(self, model, fraction: float, batch: int, backbone: SpeedBackbone, generator):
        return [counts((batch, backbone.tokens), layer.n_learners, fraction, layer.min_k, generator)
                for layer in M.acm_layers(model)]

    def apply(self, model, decisions) -> None:
        for layer, k in zip(M.acm_layers(model), decisions):
            if k.device != layer.fc1.weight.device:
                k = k.to(layer.fc1.weight.device)
            layer.force_k = k

    def executed_fraction(self, model, decisions) -> float:
        return float(M.compute_fraction(M.acm_layers(model), decisions).double().mean())

    def sample_macs(self, model, inputs):
        if hasattr(model, "_cost_ledger"):  # an encoder-decoder: its ledger charges every ACM's row_macs
            return teacher_forced_macs(model, inputs)
        return M.sample_macs(model)


FORCER = ACMForcer
