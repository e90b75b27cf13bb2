"""What the iwslt task's offline default base model must reach (``bench report`` → reports/curves.md).

The default (trans-de-en pairs, ``iwslt.d_model``/``train_steps``) must reach sacreBLEU ≥ 10 on the
trans-de-en test set and train in 60 minutes on 2 CPU cores.  The target's source: the project's
calibration issue for the offline defaults.
"""

from bench.claims import BaseTarget

CLAIMS: list = []  # no paper claim is tested on the task itself

BASE_TARGET = BaseTarget("iwslt", quality=10.0, minutes=60.0,
                         source="offline defaults: dense sacreBLEU ≥ 10 on the trans-de-en test set; ≤ 60 min on 2 cores")
