"""Model building blocks shared by every task (the transformer skeleton)."""
