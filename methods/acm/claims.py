"""ACM's paper claims (Wójcik et al., Adaptive Computation Modules), evaluated by ``bench report``.

ImageNet claims are tested on the offline stand-in (Fashion-MNIST ViT); ACM's curve there pools both loss
weightings that the campaign sweeps (the paper's α_b = 0.1 and α_b = 1), since only their union spans the
low budgets.  The speech claim uses the MLP-only ACMs.  Every seed the rows hold counts (bench/claims.py).
"""

from bench.claims import Beats, Claim, Select

ACM = Select("acm", label="ACM")
DENSE = Select("dense", label="dense base", knob="w1-d1", variant_is="")

CLAIMS = [
    Claim(
        id="acm-imagenet-dense-moefication",
        source="Wójcik et al. 2023, ACM, ImageNet-1k",
        statement="ACM stays within 1 accuracy point of the dense model over a wide budget interval, and is "
                  "above MoEfication at low budgets.",
        task="imagenet",
        checks=(
            Beats(ACM, DENSE, budgets=(0.25, 0.5, 0.75), margin=-0.01, b_is_point=True,
                  title="ACM within 1 point of the dense base at 25%, 50% and 75% of its cost"),
            Beats(ACM, Select("moefication", label="MoEfication"), budgets=(0.5, 0.6),
                  title="ACM above MoEfication at low budgets (50%, 60%: the lowest both reach)"),
        ),
        note="ACM's curve is the hull of both loss weightings the campaign sweeps (α_b = 0.1 and α_b = 1): only "
             "their union spans the low budgets, so one budget's value may come from one weighting and the next "
             "budget's from the other. Quality at a budget is read on each method's hull (Pareto points joined "
             "linearly); MoEfication's "
             "cheapest point costs 46% of the dense model, so lower budgets are not measured for it. Every "
             "method gets the task's method budget (imagenet.method_steps) on top of the base; whether ACM's "
             "distance to the dense base shrinks with a larger one is on the curves page (reports/curves.md, "
             "Method budgets).",
    ),
    Claim(
        id="acm-commonvoice-moefication",
        source="Wójcik et al. 2023, ACM, speech recognition",
        statement="ACM's word error rate is below MoEfication's at every budget.",
        task="commonvoice",
        checks=(Beats(Select("acm", label="ACM (MLP-only)", variant_has="modules=mlp"),
                      Select("moefication", label="MoEfication"), budgets=(0.6, 0.7, 0.8, 0.9),
                      title="ACM's WER below MoEfication's at 60-90% of the dense cost"),),
        note="The budgets span the cost range both methods cover.",
    ),
    Claim(
        id="acm-imagenet-avit-early-exit",
        source="Wójcik et al. 2023, ACM, ImageNet-1k (comparison with A-ViT and early exits)",
        statement="A-ViT and early-exit models sit below ACM at low budgets.",
        task="imagenet",
        checks=(
            Beats(ACM, Select("avit", label="A-ViT", variant_not="eval-eps"), budgets=(0.35, 0.5),
                  title="ACM above A-ViT at 35% and 50% of the dense cost"),
            Beats(ACM, Select("early_exit", label="early exit (SDN + ZTW)"), budgets=(0.35, 0.5),
                  title="ACM above early exit at 35% and 50% of the dense cost"),
        ),
        note="A-ViT's points evaluated with another halting ε than trained are left out. ACM's curve is the hull "
             "of both loss weightings (α_b = 0.1 and 1), as in acm-imagenet-dense-moefication.",
    ),
]
