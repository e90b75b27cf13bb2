"""What the harness times kernels and models with: the device timer (``timer``) and CUDA-graph capture
(``graphs``).  A method's own kernels live with the method (e.g. ``methods/acm/kernels``)."""
