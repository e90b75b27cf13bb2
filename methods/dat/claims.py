"""The Depth-Adaptive Transformer's paper claim (Elbayad et al. 2020), evaluated by ``bench report``."""

from bench.claims import Beats, Claim, Select

CLAIMS = [
    Claim(
        id="dat-iwslt-depth",
        source="Elbayad et al. 2020, Depth-Adaptive Transformer, IWSLT'14 de-en",
        statement="DAT matches the full-depth model's BLEU while using a fraction of the decoder blocks.",
        task="iwslt",
        checks=(Beats(Select("dat", label="DAT Tok-C thresholds", variant_has="oracle=correctness", knob=r"ae[0-9.]+"),
                      Select("dense", label="full-depth base", knob="w1-d1", variant_is=""),
                      margin=-0.3, b_is_point=True, max_cost=0.9, quantifier="any",
                      title="some DAT threshold at ≤ 90% of the dense cost within 0.3 BLEU of the full-depth base"),),
        note="'Matches' is read as non-inferiority within 0.3 BLEU, the top of the paper's gaps (~0.1-0.3 BLEU at "
             "~35 BLEU); against the far weaker offline base this margin is looser, relative to its BLEU, than the "
             "paper's. Fixed exits are static depths of the DAT model and are left "
             "out; cost is the whole model's (encoder included).",
    ),
]
