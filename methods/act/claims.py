"""ACT's paper claim (Graves 2016, parity) and the harness's own question about it, evaluated by ``bench
report`` into reports/claims.md.

Declared only (bench.claims); the report's core evaluates them on the parity rows.  ACT's trained points
are the small ponder costs (τ = 1e-3, 1e-4): with larger τ ACT collapses to one step, which the paper
reports too.  The "one-step network" is the dense base (the RNN cell applied once, ``w1-d1``); the static
recurrences are the same cell applied a fixed number of times (``w1-d<k>``).

The quoted words are those of the replication post that accompanies github.com/zphang/adaptive-computation-
time-pytorch (its reproduction of the paper's parity figure): the paper's own text is not in the project's
collection of papers, and methods/act/README.md cites the paper's §3.1 numbers.
"""

from bench.claims import HARNESS, Beats, Claim, Increases, Reaches, Select

ACT = Select("act", label="ACT (τ ≤ 1e-3)", knob=r"0\.001|0\.0001|1e-0?[34]")
# The paper claim's section: Graves' vector parity at n = 16 bits, the largest size at which the paper's
# recipe (Adam 1e-4, ponder cap 100, from scratch) converges within the CPU budget: 100,000 steps of 128
# reach 0.99 accuracy at n = 16 and 1.00 at n = 8, but 0.61 at the task's default n = 32 (the learning
# curves, reports/curves.md; the paper's n = 64 trains for far more samples).
N16 = "parity-vector n=16 "
# the one-step network there, trained for as many steps as ACT (its row names the budget as its variant)
ONE_STEP_N16 = Select("dense", label="one-step RNN (100,000 steps, as ACT)", knob="w1-d1",
                      variant_has="train_steps=100000")
STATIC = Select("dense", label="static recurrences (k steps)", knob=r"w1-d\d+", variant_is="")

CLAIMS = [
    Claim(
        id="act-parity",
        source="Graves 2016, ACT, §3.1 parity (quoted from zphang's replication post)",
        statement="With a low ponder cost, ACT performs very well on parity, where the RNN with one step per "
                  "input falls to chance; and it spends more steps where they are needed (on harder inputs).",
        task="parity",
        dataset=N16,
        quote="[…] for high difficulties, the RNNs and high ponder cost ACT models start to underperform, eventually "
              "reaching a 50% (randomc [sic] chance) error rate. On the other hand, the low ponder-cost ACTs "
              "continue to perform very well even as the difficulty increases.",
        section="the post's Implementation and Experiments (replicating the paper's parity figure)",
        axis="error rate against input difficulty (the number of ±1 entries), per ponder-cost penalty τ; "
             "no cost axis",
        checks=(
            Reaches(ACT, 0.95, quantifier="any",
                    title="a low-ponder-cost ACT performs very well (accuracy ≥ 0.95, error < 5%, at some "
                          "τ ≤ 1e-3)"),
            Reaches(ONE_STEP_N16, 0.6, fails=True, title="the one-step network fails (accuracy < 0.6; chance 0.5)"),
            Increases(ACT, x="difficulty", y="ponder_steps",
                      title="ACT ponders more on harder inputs (ponder steps rise with the number of ±1 bits)"),
        ),
        note="Tested at n = 16 bits (parity.n=16, 100,000 steps, recipe=paper), not the paper's 64 nor the task's "
             "default 32: the largest size at which the paper's recipe converges within the CPU budget (its "
             "learning curves: n = 32 reaches 0.61 accuracy after 100,000 steps, n = 16 0.99, n = 8 1.00); the "
             "one-step network it is compared with is trained there for as many steps. "
             "'Perform very well' is read as a mean error below 5% (accuracy ≥ 0.95), the paper's own figure for "
             "its low penalties as methods/act/README.md cites §3.1 ('For penalties of 0.03 and below the mean "
             "error was below 5%'); the earlier ≥ 0.99 ('solves') was stricter than either text. The quantifier "
             "is any over ACT's low-τ points (τ = 1e-3, 1e-4; τ = 1e-2 collapses to one step here): the post "
             "shows its best low-ponder curves without naming a τ. The core's rules still apply: a point holds "
             "only when its seed mean's CI and every seed's accuracy clear 0.95. The post's curves are error "
             "per difficulty; the checks read accuracy over the whole test set (difficulty uniform), which "
             "averages easy and hard inputs. 'Fails' is read as accuracy below 0.6 (the post: 50% error, "
             "chance). The third check follows the post's 'applying more intermediate computation steps as "
             "required' (Spearman correlation of ponder steps with difficulty, every τ and seed); "
             "difficulty = the number of non-zero entries of the input vector.",
    ),
    Claim(
        id="act-vs-static",
        source="after Graves 2016, ACT (the paper makes no such comparison)",
        statement="At equal mean computation, ACT is more accurate than a static recurrence that applies the "
                  "cell a fixed number of times.",
        task="parity",
        kind=HARNESS,
        axis="accuracy against mean MACs (fraction of the one-step RNN's)",
        checks=(Beats(ACT, STATIC, title="ACT better than the static recurrences interpolated at its cost"),),
        note="Graves' parity experiment compares ACT with the network without ACT (one step per input) only; "
             "whether adapting the number of steps beats a fixed number of steps at equal cost is the "
             "harness's question. Each ACT point is compared with the static recurrences' hull (1, 2, 4 steps, "
             "joined linearly) at ACT's own mean cost.",
    ),
]
