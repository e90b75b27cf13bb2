"""ACT's paper claims (Graves 2016, parity), evaluated by ``bench report`` into reports/claims.md.

Declared only (bench.claims); the report's core evaluates them on the parity rows.  ACT's trained points
are the small ponder costs (τ = 1e-3, 1e-4): with larger τ ACT collapses to one step, which the paper
reports too.  The "one-step network" is the dense base (the RNN cell applied once, ``w1-d1``); the static
recurrences are the same cell applied a fixed number of times (``w1-d<k>``).
"""

from bench.claims import Beats, Claim, Increases, Reaches, Select

ACT = Select("act", label="ACT (τ ≤ 1e-3)", knob=r"0\.001|0\.0001|1e-0?[34]")
ONE_STEP = Select("dense", label="one-step RNN", knob="w1-d1", variant_is="")
STATIC = Select("dense", label="static recurrences (k steps)", knob=r"w1-d\d+", variant_is="")

CLAIMS = [
    Claim(
        id="act-parity",
        source="Graves 2016, ACT, §3.1 parity",
        statement="ACT solves parity where a network with one step per input fails, and it ponders more on "
                  "harder inputs.",
        task="parity",
        checks=(
            Reaches(ACT, 0.99, quantifier="any", title="ACT solves parity (accuracy ≥ 0.99 at some τ)"),
            Reaches(ONE_STEP, 0.6, fails=True, title="the one-step network fails (accuracy < 0.6; chance 0.5)"),
            Increases(ACT, x="difficulty", y="ponder_steps",
                      title="ACT ponders more on harder inputs (ponder steps rise with the number of ±1 bits)"),
        ),
        note="'Solves' is read as accuracy ≥ 0.99 (Graves reports near-zero error); 'fails' as accuracy below "
             "0.6. Difficulty = the number of non-zero entries of the input vector.",
    ),
    Claim(
        id="act-vs-static",
        source="Graves 2016, ACT (adaptive vs fixed computation)",
        statement="At equal mean computation, ACT is more accurate than a static recurrence that applies the "
                  "cell a fixed number of times.",
        task="parity",
        checks=(Beats(ACT, STATIC, title="ACT better than the static recurrences interpolated at its cost"),),
        note="Each ACT point is compared with the static recurrences' hull (1, 2, 4 steps, joined linearly) at "
             "ACT's own mean cost.",
    ),
]
