"""Model building blocks shared by every task (the transformer skeleton).

``VERSION`` is the skeleton's behaviour version: bump it when a change here can change what a model built
from these blocks computes or how it trains (docs/architecture.md, "When to bump a version").  Every cached
base model and every stage trained on top of one names it in its cache key.
"""

VERSION = 1
