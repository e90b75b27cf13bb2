"""The method-agnostic cost counter: multiply-accumulates of the operations that actually execute.

Counting is dispatch-level (``torch.utils.flop_counter.FlopCounterMode``), so it sees exactly the ops
that ran on the real conditional path: a gathered token subset costs what was gathered, a skipped layer
costs nothing.  The counter reports MACs (FlopCounterMode counts 2 FLOPs per MAC; we halve), following
the vision convention (torchvision's "GFLOPS" are MACs): matmul/conv/attention MACs only; elementwise
ops, norms, softmax and bias adds are not counted.

Ops that executed, have no MAC formula, and are not known to be elementwise/view/reduction ops are
listed in ``CostReport.uncounted`` so a silent zero never goes unnoticed.  A formula is registered for
the fused CPU attention kernel and the in-place ``addmm_`` (which FlopCounterMode does not know).

Custom operators (e.g. a Triton kernel wrapped in ``torch.library.custom_op``, which FlopCounterMode cannot
see into) are counted through the formula their owner registers with :func:`register_op` (the shape of
fvcore's ``set_op_handle``): a method registers its operators' formulas when its operator module is
imported, so this module knows no method.  The formula receives the arguments each call executed with,
on CPU and CUDA alike, and is looked up at every call, so a formula registered after a counter was built
still counts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode, register_flop_formula

aten = torch.ops.aten

# Custom operators counted through a registered formula: "namespace.name" -> formula (see register_op).
_OP_FORMULAS: dict[str, Callable[..., int]] = {}

# Executed ops that carry no multiply-accumulates (besides pointwise/view ops, recognised by tag).
_NO_MAC_OPS = {
    "aten._softmax", "aten._log_softmax", "aten.native_layer_norm", "aten.native_group_norm", "aten.sum", "aten.mean",
    "aten.amax", "aten.max", "aten.min", "aten.argmax", "aten.sort", "aten.argsort", "aten.topk",
    "aten.cumsum", "aten.index_select", "aten.index", "aten.index_put", "aten.index_put_",
    "aten.index_add", "aten.index_add_", "aten.scatter", "aten.scatter_", "aten.scatter_add",
    "aten.scatter_add_", "aten.gather", "aten.masked_select", "aten.nonzero", "aten.cat", "aten.stack",
    "aten.copy_", "aten._to_copy", "aten.clone", "aten.empty", "aten.empty_like", "aten.zeros",
    "aten.zeros_like", "aten.ones", "aten.ones_like", "aten.full", "aten.full_like", "aten.arange",
    "aten.new_zeros", "aten.new_empty", "aten.new_ones", "aten.new_full", "aten.bincount",
    "aten.histc", "aten.repeat_interleave", "aten.sigmoid", "aten.tanh", "aten.gelu", "aten.relu",
    "aten.embedding", "aten.one_hot", "aten.constant_pad_nd", "aten.lift_fresh", "aten.fill_",
    "aten.zero_", "aten.any", "aten.all", "aten.eq", "aten.ne", "aten.lt", "aten.le", "aten.gt",
    "aten.ge", "aten.where", "aten.masked_fill", "aten.masked_fill_", "aten.clamp", "aten.clamp_min",
    "aten.max_pool2d_with_indices", "aten.avg_pool2d", "aten.native_dropout", "aten.count_nonzero",
    "aten.unique_consecutive", "aten._unique2", "aten.split_with_sizes", "aten.unbind", "aten.split",
    "aten.repeat", "aten.flip", "aten.roll", "aten.linalg_vector_norm", "aten.norm", "aten.var_mean",
    "aten.std", "aten.var", "aten.prod", "aten.logsumexp", "aten.randint", "aten.rand", "aten.randn",
    "aten.bernoulli", "aten.uniform_", "aten.normal_", "aten.exponential_", "aten.set_", "aten.item",
    "aten._local_scalar_dense", "aten.resize_", "aten.detach", "aten.alias", "aten.searchsorted",
    "aten.bucketize", "aten.stft", "aten._fft_r2c", "aten.abs", "aten.log", "aten.exp", "aten.triu", "aten.tril",
    "aten._unsafe_view", "aten.__and__", "aten.__or__", "aten.__xor__", "aten.__invert__",
    "aten.is_nonzero", "aten.index_copy", "aten.index_copy_", "aten.logical_and", "aten.logical_or",
    "aten.scalar_tensor", "aten._safe_softmax", "aten.logical_not", "aten.triu", "aten.tril", "aten.bitwise_and",
    "aten.bitwise_or", "aten.bitwise_not", "aten.view", "aten.expand", "aten.t", "aten.transpose", "aten.permute",
}


@register_flop_formula(aten._scaled_dot_product_flash_attention_for_cpu)
def _sdpa_cpu_flop(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
    """FLOPs (2 per MAC) of QKᵀ and AV for the fused CPU attention kernel: [B, H, T, dh] inputs."""
    b, h, t_q, d_qk = query_shape
    t_k, d_v = key_shape[-2], value_shape[-1]
    return 2 * b * h * t_q * t_k * d_qk + 2 * b * h * t_q * t_k * d_v


@register_flop_formula(aten.addmm_)
def _addmm_inplace_flop(self_shape, a_shape, b_shape, *args, out_shape=None, **kwargs) -> int:
    """The in-place ``addmm_`` (accumulating GEMMs, e.g. ``acm_prefix``): the MACs of ``addmm``."""
    m, k = a_shape
    return 2 * m * k * b_shape[1]


def op_name(op) -> str:
    """The counter's name of an operator ("namespace.name", as in ``CostReport.by_op``): from the operator
    (``torch.ops.ns.name``), one of its overloads (``torch.ops.ns.name.default``) or "ns::name"."""
    if isinstance(op, str):
        return op.replace("::", ".")
    return str(getattr(op, "overloadpacket", op))


def register_op(op, formula: Callable[..., int]) -> None:
    """Count the operator ``op`` (see :func:`op_name` for the forms it may take) with ``formula``.

    ``formula(*args, **kwargs) -> int`` returns the MACs of one call from the arguments the call executed
    with (real tensors on the call's device: it may read their values, which syncs with the host; it runs
    only inside a counting pass).  The formula replaces any count torch's FlopCounterMode has for the
    operator; registering the same operator again replaces its formula."""
    _OP_FORMULAS[op_name(op)] = formula


class _ExecutedOps(TorchDispatchMode):
    """Records the name of every aten op that executes, and counts the MACs of registered operators."""

    def __init__(self):
        super().__init__()
        self.ops: dict[str, bool] = {}
        self.macs: dict[str, int] = {}  # registered operators: name -> MACs counted through their formula

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        packet = func._overloadpacket
        if packet not in self.ops:
            tags = set(getattr(func, "tags", ()))
            # Composite ops (e.g. aten.linear under inference_mode) also dispatch their decomposition,
            # whose ops are counted; pointwise and view ops carry no multiply-accumulates.
            composite = torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), "CompositeImplicitAutograd")
            self.ops[packet] = (composite or torch.Tag.pointwise in tags or func.is_view
                                or torch.Tag.view_copy in tags)
        out = func(*args, **kwargs)
        name = str(packet)
        formula = _OP_FORMULAS.get(name)
        if formula is not None:
            self.macs[name] = self.macs.get(name, 0) + int(formula(*args, **kwargs))
        return out


@dataclass
class CostReport:
    macs: int  # total multiply-accumulates executed
    by_op: dict[str, int] = field(default_factory=dict)
    uncounted: list[str] = field(default_factory=list)


class count_macs:
    """Context manager: ``with count_macs() as c: model(x)``; then ``c.report``."""

    def __init__(self):
        self._flops = FlopCounterMode(display=False)
        self._ops = _ExecutedOps()
        self.report: CostReport | None = None

    def __enter__(self) -> "count_macs":
        self._flops.__enter__()
        self._ops.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._ops.__exit__(*exc)
        self._flops.__exit__(*exc)
        counts = self._flops.get_flop_counts().get("Global", {})
        by_op = {str(op): int(v) // 2 for op, v in counts.items()}
        by_op.update(self._ops.macs)  # a registered formula replaces torch's count
        counted = set(by_op)
        uncounted = sorted(
            name for name, harmless in ((str(p), h) for p, h in self._ops.ops.items())
            if not harmless and name not in counted and name not in _NO_MAC_OPS
        )
        self.report = CostReport(macs=sum(by_op.values()), by_op=by_op, uncounted=uncounted)


@torch.no_grad()
def count(model: torch.nn.Module, *inputs, **kwargs) -> CostReport:
    """MACs executed by one forward of ``model`` on ``inputs``."""
    with count_macs() as counter:
        model(*inputs, **kwargs)
    assert counter.report is not None
    return counter.report


def percentile_summary(per_sample: torch.Tensor) -> dict[str, float]:
    """mean/p10/p50/p90 of per-sample MACs."""
    values = per_sample.double()
    q = torch.quantile(values, torch.tensor([0.1, 0.5, 0.9], dtype=torch.float64))
    return {"macs_mean": float(values.mean()), "macs_p10": float(q[0]), "macs_p50": float(q[1]),
            "macs_p90": float(q[2])}
