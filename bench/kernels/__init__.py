"""Conditional-computation kernels: PyTorch reference paths and the optional Triton ACM kernel."""
