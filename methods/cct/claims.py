"""CCT's paper claim (Controlling Computation versus Quality), evaluated by ``bench report`` on the vision
and the translation task."""

from bench.claims import Beats, Claim, Select

STATEMENT = ("One CCT model is competitive with the dense model at its full budget, and better than static "
             "models of equal cost at low budgets.")
SOURCE = "Controlling Computation versus Quality (CCT), §5"

CLAIMS = [
    Claim(
        id="cct-imagenet",
        source=SOURCE,
        statement=STATEMENT,
        task="imagenet",
        checks=(
            Beats(Select("cct", label="CCT budget 1", knob="1.0"),
                  Select("dense", label="dense base", knob="w1-d1", variant_is=""),
                  margin=-0.01, b_is_point=True, title="competitive at full budget (within 1 accuracy point)"),
            Beats(Select("cct", label="CCT budgets ≤ 0.5", knob=r"0\.2|0\.33|0\.5"),
                  Select("dense", label="static ViTs", variant_is=""),
                  title="better than the static ViTs (hull of the smaller dense models) at each CCT point's cost"),
        ),
    ),
    Claim(
        id="cct-iwslt",
        source=SOURCE,
        statement=STATEMENT,
        task="iwslt",
        checks=(
            Beats(Select("cct", label="CCT (1, 1)", knob="e1-d1", setting_has="pairs=diagonal"),
                  Select("dense", label="dense base", knob="w1-d1", variant_is=""),
                  margin=-0.3, b_is_point=True, title="competitive at full budget (within 0.3 BLEU)"),
            Beats(Select("cct", label="CCT budgets < 1", knob=r"e[0-9.]+-d0\.(2|33|5)"),
                  Select("dense", label="static models", variant_is=""),
                  title="better than the static models (smaller dense models' hull) at each CCT point's cost"),
        ),
        note="Both budget sets count: (p, p) for encoder and decoder, and (1, p) for the decoder only.",
    ),
]
