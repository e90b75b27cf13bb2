"""The method-agnostic cost counter: multiply-accumulates of the operations that actually execute.

Counting is dispatch-level: one ``TorchDispatchMode`` sees exactly the ops that ran on the real
conditional path (a gathered token subset costs what was gathered, a skipped layer costs nothing) and
applies torch's FLOP formulas (``torch.utils.flop_counter``'s table, the one ``FlopCounterMode`` uses, by
the same rule: a composite op is decomposed and its parts are counted).  Unlike ``FlopCounterMode`` it
keeps no per-module breakdown (no module hooks) and decides once per operator overload what to do with
it, which keeps a counting pass close to a plain forward.  The counter reports MACs (torch's formulas count
2 FLOPs per MAC; we halve), following
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
from torch._C import DispatchKey
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import flop_registry, register_flop_formula

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


def _shape(value):
    """A tensor's shape, a flat list or tuple of tensors as their shapes, anything else as it is; None for
    a nesting this does not read (the formula's own wrapper then converts it)."""
    if isinstance(value, torch.Tensor):
        return value.shape
    if isinstance(value, (list, tuple)):
        if not any(isinstance(v, (torch.Tensor, list, tuple, dict)) for v in value):
            return value
        if all(isinstance(v, torch.Tensor) for v in value):
            return type(value)(v.shape for v in value)
        return None
    return None if isinstance(value, dict) else value


def _torch_flops(formula, args: tuple, kwargs: dict, out) -> int:
    """torch's FLOP formula of one call.  ``register_flop_formula`` wraps a formula of shapes in a wrapper
    that converts every argument with ``tree_map``; for the flat arguments of the ops that have formulas the
    shapes are taken here directly (the same values, without the pytree walk), else the wrapper runs."""
    shape_formula = getattr(formula, "__wrapped__", None)
    if shape_formula is not None:
        shapes = [_shape(a) for a in args]
        kw_shapes = {k: _shape(v) for k, v in kwargs.items()}
        out_shape = _shape(out)
        if out_shape is not None and not any(s is None and a is not None for s, a in zip(shapes, args)) \
                and not any(s is None and kwargs[k] is not None for k, s in kw_shapes.items()):
            return shape_formula(*shapes, **kw_shapes, out_shape=out_shape)
    return formula(*args, **kwargs, out_val=out)


class _Counting(TorchDispatchMode):
    """Counts the FLOPs of every op that executes (torch's formulas), the MACs of registered operators
    (:func:`register_op`), and records every op the forward called, with whether it can carry no MACs.

    Each operator overload is looked at once (:meth:`_plan`): whether it decomposes (a composite op: its
    parts are dispatched again and counted, as ``FlopCounterMode`` does) and torch's formula for it.  The
    ops a composite op decomposes into are counted, not recorded: the record lists what the model called."""

    def __init__(self):
        super().__init__()
        self.flops: dict = {}  # operator packet -> FLOPs by torch's formula (2 per MAC)
        self.macs: dict[str, int] = {}  # registered operators: name -> MACs counted through their formula
        self.ops: dict = {}  # packet of every op the forward called -> whether it carries no MACs
        self._plans: dict = {}
        self._inside = 0  # > 0 while a composite op's parts run

    def _plan(self, func) -> tuple:
        plan = self._plans.get(func)
        if plan is None:
            packet = func._overloadpacket
            decomposes = func is not torch.ops.prim.device.default and (
                DispatchKey.CompositeImplicitAutograd in func.py_kernels
                or torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), "CompositeImplicitAutograd"))
            plan = self._plans[func] = (packet, str(packet), flop_registry.get(packet), decomposes)
        return plan

    def _record(self, func, packet, decomposes: bool) -> None:
        # a composite op's parts are counted; pointwise and view ops carry no multiply-accumulates
        tags = set(getattr(func, "tags", ()))
        self.ops[packet] = (decomposes or torch.Tag.pointwise in tags or func.is_view or torch.Tag.view_copy in tags)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        packet, name, torch_formula, decomposes = self._plan(func)
        top = not self._inside
        if top and packet not in self.ops:
            self._record(func, packet, decomposes)
        if decomposes:
            self._inside += 1
            try:
                with self:
                    out = func.decompose(*args, **kwargs)
            finally:
                self._inside -= 1
        else:
            out = func(*args, **kwargs)
            if torch_formula is not None:
                self.flops[packet] = self.flops.get(packet, 0) + _torch_flops(torch_formula, args, kwargs, out)
        if top:
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
        self._mode = _Counting()
        self.report: CostReport | None = None

    def __enter__(self) -> "count_macs":
        self._mode.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._mode.__exit__(*exc)
        by_op = {str(op): int(v) // 2 for op, v in self._mode.flops.items()}
        by_op.update(self._mode.macs)  # a registered formula replaces torch's count
        counted = set(by_op)
        uncounted = sorted(
            name for name, harmless in ((str(p), h) for p, h in self._mode.ops.items())
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
