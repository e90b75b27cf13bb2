"""What the commonvoice task's offline default base model must reach (``bench report`` → reports/curves.md).

A CTC model that still emits mostly blanks (WER near 1) cannot show what an adaptive method costs in
quality; the default (espeak-ng set, ``commonvoice.d_model``/``train_steps``) must reach WER ≤ 0.30 on the
held-out espeak-ng sentences and train in 60 minutes on 2 CPU cores.  The target's source: the project's
calibration issue for the offline defaults.
"""

from bench.claims import BaseTarget

CLAIMS: list = []  # no paper claim is tested on the task itself

BASE_TARGET = BaseTarget("commonvoice", quality=0.30, minutes=60.0,
                         source="offline defaults: dense WER ≤ 0.30 on the espeak-ng held-out set; ≤ 60 min on 2 cores")
