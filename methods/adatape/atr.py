"""Adaptive Tape Reading (AdaTape, Algorithm 2), batched over samples, each sample with its own halting.

Per sample, with query q (the class token after encoder layer 1), bank B [C, d] and key size h:

    repeat for s = 1..T:
        scores = LN(q)[:h] · LN(B)[:, :h]ᵀ − 1e9 · used        (masking by subtracting, not multiplying)
        i = top-K(scores), K = T/τ (an integer)
        w = softmax(scores[i] / √h)
        token_s = Σ_k w_k · B[i_k]                             (one merged tape token, appended)
        if acc + max(w) ≥ τ or s = T: stop                     (the token of the halting step is kept)
        acc += max(w); l_atr += 1 − Σ_k w_k²; used[i] = 1; q ← (q + token_s)/2  (or q ← token_s)

so a sample reads n ∈ [1, T] tape tokens.  The LayerNorm is shared by query and bank and is used for
scoring only; the merged value is the raw bank vector (the paper's s = Σ w_k s_k on Z_bank).

Choices where paper and code notes differ: the halting test is ``≥``
(the code's), the halting step's token is kept and counted, and its step loss is not added (Algorithm 2
breaks before line 13).  A step runs only for the samples still reading (rows are gathered), so the work
done per sample is exactly its own n steps: n·(C·h + K·d) MACs (scores and merge; top-K, softmax and the
mask carry none).  The same function serves training and evaluation; autograd flows through the
softmax weights into the query and the bank keys, and through the merge into the bank values.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

MASK = 1e9


@dataclass
class ATRResult:
    tape: Tensor  # [B, T, d]: tape tokens; slots past a sample's length are zero
    length: Tensor  # [B] long: tape tokens read, 1..T
    loss: Tensor  # [B]: Σ over non-halting steps of 1 − Σ w²
    max_weight: Tensor  # [B, T]: max(w) of each executed step (0 where not executed)


def k_per_step(max_tape: int, tau: float) -> int:
    """K = T/τ; raises ValueError unless it is a positive integer."""
    k = max_tape / tau
    if abs(k - round(k)) > 1e-9 or round(k) < 1:
        raise ValueError(f"K = T/tau = {max_tape}/{tau:g} = {k:g} is not a positive integer")
    return int(round(k))


def atr(query: Tensor, keys: Tensor, values: Tensor, norm, *, max_tape: int, tau: float, k: int, key_dim: int,
        complex_query: bool = True, used: Tensor | None = None, cap: int | None = None,
        force: Tensor | None = None) -> ATRResult:
    """Adaptive Tape Reading for a batch.

    ``query`` [B, d]: the un-normalised query (noise, if any, already added).  ``keys``: [B, C, h] or
    [C, h], the bank after the shared LayerNorm ``norm``, first h = ``key_dim`` dims.  ``values``:
    [B, C, d] or [C, d], the raw bank.  ``used`` [B, C] bool: entries masked from the start (random bank
    dropout in training).  ``cap``: stop every sample after ``cap`` steps (evaluation-time harness
    extension; otherwise the same rule).  ``force`` [B] long in 1..T: each sample reads exactly that many
    tokens, the halting rule replaced (``bench speed``'s forced decisions; the reading itself is unchanged).
    """
    b, d = query.shape
    shared = keys.dim() == 2
    n_bank = keys.shape[-2]
    if k > n_bank:
        raise ValueError(f"K = {k} exceeds the bank size {n_bank}")
    steps = min(max_tape, cap) if cap else max_tape
    device = query.device
    used = torch.zeros(b, n_bank, dtype=torch.bool, device=device) if used is None else used.clone()
    acc = query.new_zeros(b)
    loss = query.new_zeros(b)
    length = torch.zeros(b, dtype=torch.long, device=device)
    max_w = query.new_zeros(b, max_tape)
    tape = query.new_zeros(b, max_tape, d)
    rows = torch.arange(b, device=device)  # samples still reading
    q = query
    scale = 1.0 / math.sqrt(key_dim)
    for step in range(steps):
        q_rows = q.index_select(0, rows)
        qk = norm(q_rows)[:, :key_dim]
        if shared:
            scores = torch.mm(qk, keys.t())  # [r, C]
        else:
            scores = torch.bmm(keys.index_select(0, rows), qk.unsqueeze(-1)).squeeze(-1)  # [r, C]
        scores = scores - MASK * used.index_select(0, rows).to(scores.dtype)
        top, idx = torch.topk(scores, k, dim=-1)  # [r, K]
        w = torch.softmax(top * scale, dim=-1)
        if shared:
            picked = values[idx]  # [r, K, d]
        else:
            picked = values.index_select(0, rows).gather(1, idx.unsqueeze(-1).expand(-1, -1, d))
        token = torch.bmm(w.unsqueeze(1), picked).squeeze(1)  # [r, d]
        wmax = w.max(dim=-1).values
        acc_rows = acc.index_select(0, rows)
        stop = acc_rows + wmax >= tau if force is None else force.index_select(0, rows) <= step + 1
        if step == steps - 1:
            stop = torch.ones_like(stop)
        go = ~stop
        slot = torch.full_like(rows, step)
        tape = tape.index_put((rows, slot), token)
        max_w = max_w.index_put((rows, slot), wmax)
        length = length.index_put((rows,), slot + 1)
        acc = acc.index_put((rows,), torch.where(go, acc_rows + wmax, acc_rows))
        step_loss = torch.where(go, 1.0 - (w * w).sum(dim=-1), torch.zeros_like(wmax))
        loss = loss.index_put((rows,), loss.index_select(0, rows) + step_loss)
        if not bool(go.any()):
            break
        rows_go, idx_go = rows[go], idx[go]
        used = used.index_put((rows_go.unsqueeze(-1).expand_as(idx_go), idx_go),
                              torch.ones_like(idx_go, dtype=torch.bool))
        new_q = (q_rows[go] + token[go]) / 2 if complex_query else token[go]
        q = q.index_put((rows_go,), new_q)
        rows = rows_go
    return ATRResult(tape=tape, length=length, loss=loss, max_weight=max_w)
