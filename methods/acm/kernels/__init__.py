"""ACM's forward kernels: the PyTorch paths (``acm_torch``), the Triton kernel (``acm_triton``, optional: needs
Triton), the two as PyTorch operators with their MAC formulas (``acm_ops``) and the kernel benchmark behind
``python -m bench kernels``."""
