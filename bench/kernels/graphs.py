"""CUDA-graph helpers for the benchmarks: capture a warmed-up callable, check a callable for host syncs.

A captured graph replays the recorded kernels with no Python, no dispatcher and no launch overhead, which
is what a small batch needs (one ViT-B ACM layer at batch 1 is launch-bound).  Capture requires a path
without host synchronisation: the Triton ACM path and the dense paths qualify; the PyTorch sorted and
naive paths read group sizes / indices back to the host and cannot be captured (they are never tried).
"""

from __future__ import annotations

from typing import Callable


def capture(fn: Callable[[], object], warmup: int = 3) -> Callable[[], object]:  # pragma: no cover - needs CUDA
    """Run ``fn`` ``warmup`` times on a side stream (allocator, autotuning, lazy init), capture one call in a
    ``torch.cuda.CUDAGraph`` and return a callable that replays it (returning the captured output tensor,
    overwritten at each replay).  Inputs must be static tensors that ``fn`` closes over."""
    import torch

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(warmup):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn()

    def replay():
        graph.replay()
        return out

    replay.graph = graph  # keep the graph (and its memory pool) alive with the callable
    return replay


def host_sync_free(fn: Callable[[], object]) -> str:  # pragma: no cover - needs CUDA
    """Call ``fn`` once under ``torch.cuda.set_sync_debug_mode("error")``: "ok" if it never synchronizes
    the host with the device, else the first line of the error."""
    import torch

    torch.cuda.synchronize()
    previous = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")
    try:
        fn()
        return "ok"
    except RuntimeError as err:
        return "syncs: " + str(err).splitlines()[0][:200]
    finally:
        torch.cuda.set_sync_debug_mode(previous)
        torch.cuda.synchronize()
