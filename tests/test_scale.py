"""Issue 16: data-parallel training (gloo on CPU), precision, accumulation, streaming evaluation, SDPA.

* two processes at global batch B train the same weights as one process at batch B (fp32 tolerance; no
  dropout), and a two-process run interrupted half-way resumes to the same final weights;
* ``torchrun --nproc_per_node=2 -m bench run`` composes its config in every rank and writes each row once,
  and so does a submitit job of two tasks (the SLURM launcher's local twin);
* bf16 on CPU runs one method end to end (autocast training; evaluation, counting and timing in bf16);
* evaluation holds one batch at a time (the evaluation set is never materialised);
* with one process, fp32 and ``accumulate=1`` the trained weights are bit-identical to the trainer before
  the scale work (digests computed from that code, one thread), and the MAC counter counts exactly what it counted
  before attention moved to ``F.scaled_dot_product_attention``.
"""

from __future__ import annotations

import hashlib
import os
import socket
import subprocess
import sys
import weakref
from pathlib import Path

import pandas as pd
import pytest
import torch
import torch.multiprocessing as mp
from torch import nn

from bench import cost, runner, train
from bench.api import Batch
from bench.models.seq2seq import SelfAttention, attend
from bench.models.transformer import Attention
from tests import scale_worker
from tests.helpers import build_tiny, compose_tiny, tiny_overrides

ROOT = Path(__file__).resolve().parent.parent
DDP_EXTRA = ("imagenet.train_steps=4", "imagenet.method_steps=4", "imagenet.batch_size=8", "threads=1")


def _digest(model: nn.Module) -> str:
    h = hashlib.sha256()
    for key, value in sorted(model.state_dict().items()):
        h.update(key.encode())
        h.update(value.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- data parallel --------------------------------------------------------------------------------------
def _assert_close_weights(got: dict, want: dict) -> None:
    assert got.keys() == want.keys()
    bad = {}
    for key, value in want.items():
        if key.endswith("attn.k.bias"):
            # Softmax is invariant to the key bias, so its gradient is rounding noise that Adam normalises
            # to full-size steps: it differs between any two summation orders, single-process runs included.
            continue
        gap = float((got[key].double() - value.double()).abs().max())
        if gap > 1e-5 + 1e-4 * float(value.double().abs().max()):
            bad[key] = gap
    assert not bad, bad


def test_two_processes_match_one_and_resume_exactly(tmp_path):
    mp.spawn(scale_worker.main, args=(2, str(tmp_path), _free_port(), DDP_EXTRA), nprocs=2, join=True)
    ddp = torch.load(tmp_path / "ddp.pt", weights_only=True)
    torch.set_num_threads(1)
    single = scale_worker.trained("early_exit", "imagenet", tmp_path, "single", DDP_EXTRA)
    _assert_close_weights(ddp["full"], single)
    _assert_close_weights(ddp["moefication"],
                          scale_worker.trained("moefication", "imagenet", tmp_path, "single-m", DDP_EXTRA))
    for key, value in single.items():
        torch.testing.assert_close(ddp["resumed"][key], ddp["full"][key], rtol=0, atol=0, msg=key)
    # the comparison is not vacuous: training moved the weights away from a fresh model's
    fresh = scale_worker.trained("early_exit", "imagenet", tmp_path, "fresh", DDP_EXTRA + (
        "imagenet.train_steps=0", "imagenet.method_steps=1"))
    moved = sum(not torch.equal(fresh[k], single[k]) for k in single if k.startswith("encoder."))
    assert moved > 0


@pytest.mark.skipif(not hasattr(os, "fork"), reason="torchrun subprocesses")
def test_torchrun_two_processes_write_one_row(tmp_path):
    """The issue's done-when command with a tiny budget: two ranks, one row (and one samples file)."""
    overrides = tiny_overrides("acm", "imagenet", tmp_path, "imagenet.batch_size=16", "timing=false",
                               "imagenet.eval_samples=64", "imagenet.eval_batch=32")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "BENCH_QUIET": "1", "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--master_port", str(_free_port()),
           "-m", "bench", "run", *overrides]
    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "find_unused_parameters" not in done.stderr, "every trained parameter is used: DDP must not search"
    rows = sorted((tmp_path / "results" / "imagenet" / "acm").glob("*.csv"))
    assert len(rows) == 1, rows
    assert len(list(rows[0].parent.glob("*.samples.csv.gz"))) == 1
    row = pd.read_csv(rows[0]).iloc[0]
    assert row["world_size"] == 2 and row["precision"] == "fp32" and row["cost_check"] == "agree"
    assert row["command"].startswith("torchrun --nproc_per_node=2 -m bench run method=acm task=imagenet")
    assert not list(tmp_path.glob("outputs")), "torchrun runs compose their config (no Hydra output directory)"


def test_submitit_two_tasks_per_node_train_together_and_write_one_row(tmp_path):
    """The SLURM path on submitit's local twin: tasks_per_node=2 makes one job of two ranks (rank and world
    size from submitit's environment), which writes its row once."""
    args = [sys.executable, "-m", "bench", "run", "-m", "hydra/launcher=submitit_local", "hydra.launcher.timeout_min=5",
            "hydra.launcher.tasks_per_node=2", "method=dense", "task=parity", "parity.n=8", "parity.hidden=8",
            "parity.train_steps=20", "parity.eval_batch=32", "threads=1", "timing=false", "count_batches=1",
            f"results_dir={tmp_path / 'results'}", f"cache_dir={tmp_path / 'cache'}"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "BENCH_QUIET": "1", "OMP_NUM_THREADS": "1"}
    done = subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = sorted((tmp_path / "results" / "parity" / "dense").glob("*.csv"))
    assert len(rows) == 1, rows
    assert pd.read_csv(rows[0]).iloc[0]["world_size"] == 2
    assert len(list((tmp_path / "runs").rglob("*_1_log.out"))) == 1  # the job really ran two tasks


# --- threads --------------------------------------------------------------------------------------------
def test_stages_train_on_train_threads_and_evaluation_on_threads(tmp_path, monkeypatch):
    seen: list[int] = []
    real_fit = train.fit
    monkeypatch.setattr(train, "fit", lambda *a, **k: (seen.append(torch.get_num_threads()), real_fit(*a, **k))[1])
    before = torch.get_num_threads()
    try:
        cfg = compose_tiny("dense", "parity", tmp_path, "threads=2", "train_threads=1", "timing=false")
        runner.run(cfg, "dense", "parity", "test")
        assert seen and set(seen) == {1}  # every stage trained on one thread
        assert torch.get_num_threads() == 2  # the run's thread count is back for evaluation and timing
        assert runner.config_hash(cfg, "dense", "parity") == runner.config_hash(
            compose_tiny("dense", "parity", tmp_path, "threads=2", "timing=false"), "dense", "parity")
    finally:
        torch.set_num_threads(before)


# --- precision and accumulation -------------------------------------------------------------------------
def test_bf16_autocast_runs_one_method_end_to_end(tmp_path):
    cfg = compose_tiny("acm", "imagenet", tmp_path, "precision=bf16", "imagenet.eval_samples=64")
    written = runner.run(cfg, "acm", "imagenet", "test")
    assert len(written) == 1
    row = pd.read_csv(written[0]).iloc[0]
    assert (row["precision"], row["count_dtype"], row["timing_dtype"]) == ("bf16", "bfloat16", "bfloat16")
    assert row["cost_check"] == "agree" and row["world_size"] == 1
    assert row["macs_dense"] == 12906496 / 128  # the counter's MACs do not depend on the dtype
    assert row["throughput_per_s"] > 0 and 0.0 <= row["quality"] <= 1.0


def _toy_fit(tmp: Path, name: str, **options) -> nn.Module:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 3))
    data = torch.Generator().manual_seed(1)
    xs, ys = torch.randn(5, 12, 6, generator=data), torch.randint(0, 3, (5, 12), generator=data)
    train.fit(model, lambda s: Batch(xs[s], ys[s]), lambda m, b: nn.functional.cross_entropy(m(b.x), b.y),
              steps=5, lr=0.05, ckpt=tmp / f"{name}.pt", desc=name, **options)
    return model


def test_accumulation_matches_one_batch_and_fp16_scaler_runs(tmp_path):
    one, two, three = (_toy_fit(tmp_path, f"acc{k}", accumulate=k) for k in (1, 2, 3))
    for other in (two, three):
        for a, b in zip(one.parameters(), other.parameters()):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    fp16 = _toy_fit(tmp_path, "fp16", precision="fp16")  # autocast + GradScaler (CPU)
    assert all(torch.isfinite(p).all() for p in fp16.parameters())
    assert not torch.equal(fp16[0].weight, one[0].weight)
    loader_workers = _toy_fit(tmp_path, "workers", num_workers=1)
    for a, b in zip(one.parameters(), loader_workers.parameters()):
        assert torch.equal(a, b)  # a batch built in a DataLoader worker is the same batch


_HOST_READS = ("item", "tolist", "__float__", "__int__", "__bool__")


def _host_reads(tmp: Path, steps: int, precision: str) -> int:
    """How many times training reads a tensor back to the host in ``steps`` steps (losses read at the end)."""
    reads = {"n": 0}
    originals = {name: getattr(torch.Tensor, name) for name in _HOST_READS}
    for name, original in originals.items():
        def counted(self, *args, _original=original, **kwargs):
            reads["n"] += 1
            return _original(self, *args, **kwargs)

        setattr(torch.Tensor, name, counted)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 3))
    xs, ys = torch.randn(steps, 12, 6), torch.randint(0, 3, (steps, 12))
    try:
        train.fit(model, lambda s: Batch(xs[s], ys[s]), lambda m, b: nn.functional.cross_entropy(m(b.x), b.y),
                  steps=steps, lr=0.05, ckpt=tmp / f"reads-{precision}-{steps}.pt",
                  desc="reads", precision=precision, log_every=10_000, save_every_s=1e9)
    finally:
        for name, original in originals.items():
            setattr(torch.Tensor, name, original)
    return reads["n"]


def test_fp16_training_steps_do_not_wait_for_the_host(tmp_path):
    """With fp16, eight more steps add no read of a tensor: losses stay on the device until the log, and the
    GradScaler hands its inf check to the fused optimizer instead of reading it back (with the unfused
    optimizer, ``GradScaler.step`` calls ``.item()`` on that device tensor every step, which fails this
    test).  fp32/bf16 keep the unfused Adam, which reads its step counter, a host tensor on every device:
    that read waits for nothing (``state['step']`` lives on the CPU unless the optimizer is fused)."""
    short, long = _host_reads(tmp_path, 4, "fp16"), _host_reads(tmp_path, 12, "fp16")
    assert long == short


def test_fp16_skips_a_step_with_infinite_gradients(tmp_path):
    """Loss scaling still works on the device: a step whose gradients overflow leaves the weights as they
    were and halves the scale; the next finite step trains."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 3))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    xs, ys = torch.randn(2, 12, 6), torch.randint(0, 3, (2, 12))

    def loss_fn(m, b):
        loss = nn.functional.cross_entropy(m(b.x), b.y)
        return loss * float("inf") if torch.equal(b.x, xs[0]) else loss

    with pytest.raises(train.Interrupted):  # stop after the overflowing step, keeping its partial state
        train.fit(model, lambda s: Batch(xs[s], ys[s]), loss_fn, steps=2, lr=0.05, ckpt=tmp_path / "one.pt",
                  desc="inf", precision="fp16", stop_after=1)
    for key, value in model.state_dict().items():
        assert torch.equal(value, before[key]), key
    state = torch.load(tmp_path / "one.partial.pt", weights_only=False)
    fresh = torch.amp.GradScaler("cpu")
    assert state["scaler"]["scale"] == fresh.get_scale() * fresh.get_backoff_factor()  # halved
    model2 = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 3))
    model2.load_state_dict(before)
    train.fit(model2, lambda s: Batch(xs[s], ys[s]), loss_fn, steps=2, lr=0.05, ckpt=tmp_path / "two.pt",
              desc="inf", precision="fp16")
    assert not torch.equal(model2[0].weight, before["0.weight"])  # the finite second step trained


# --- streaming evaluation -------------------------------------------------------------------------------
def test_evaluation_holds_one_batch_at_a_time(tmp_path):
    task, method, model = build_tiny("dense", "imagenet", tmp_path, "imagenet.eval_samples=600")
    alive: weakref.WeakSet = weakref.WeakSet()
    most, made = [0], [0]
    inner = task.eval_batches

    def tracked():
        for batch in inner():
            alive.add(batch.x)  # CPython frees a batch as soon as nothing refers to it
            made[0] += 1
            most[0] = max(most[0], len(alive))
            yield batch

    task.cfg.eval_batch = 20
    task.eval_batches = tracked
    quality, samples = runner.evaluate(method, model, task, limit=580, device="cpu")
    assert len(samples) == 580 and made[0] >= 29  # 29 batches (and one more read to see the limit)
    assert most[0] <= 2, f"{most[0]} evaluation batches were alive at once"


# --- numerics kept: trainer digests and counted MACs ------------------------------------------------------
def _cpu_vendor() -> str:
    """The processor's vendor (``vendor_id`` in /proc/cpuinfo), or the platform's processor string."""
    import platform

    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("vendor_id"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


# fp32 training is bit-identical run to run on one processor, but not between processor models: the CPU
# kernels (oneDNN, MKL) pick their code paths by processor, so the same steps round differently on an Intel
# Xeon and an AMD EPYC (the commonvoice base's WER differs between the two, reports/curves.md).  A digest
# therefore holds on the processor kind it was recorded on.
DIGESTS = {
    # Intel Xeon: the trainer before the protocol and DDP changes (e97de12: 2047…; the RNN has no attention)
    # and the trainer before DDP, with SDPA attention (df2e…, 2fcc…)
    "GenuineIntel": {"act": "20478196e97c6ae6", "dense": "df2eadda14dec3d5", "early_exit": "2fccb06a512029b1"},
    # AMD EPYC: recorded from the trainer of 888c13a (the same three digests at abf982b); the trainers
    # before DDP never ran on this processor, so here the test guards later changes only
    "AuthenticAMD": {"act": "e0f37b676f5be9b5", "dense": "1333a857d1b58396", "early_exit": "a0bce128e6160b2f"},
}


@pytest.mark.parametrize("method,task,extra", [
    ("act", "parity", ("parity.variant=vector", "act.lr=1e-3")),  # the rate the digests were recorded at
    ("dense", "imagenet", ()),
    ("early_exit", "imagenet", ()),
])
def test_single_process_fp32_weights_are_bit_identical(tmp_path, method, task, extra):
    vendor = _cpu_vendor()
    if vendor not in DIGESTS:
        pytest.skip(f"no trainer digest recorded for processors of vendor {vendor!r} (DIGESTS)")
    expected = DIGESTS[vendor][method]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        _, _, model = build_tiny(method, task, tmp_path, "seed=3", *extra)
    finally:
        torch.set_num_threads(threads)
    assert _digest(model) == expected


def test_counted_macs_are_unchanged_by_sdpa(tmp_path):
    """MACs counted before attention moved to SDPA (one evaluation batch of each untrained dense backbone)."""
    before = {"imagenet": 12906496, "commonvoice": 3827712, "iwslt": 785664, "parity": 1453056}
    for task_name, macs in before.items():
        extra = ("parity.variant=sequence",) if task_name == "parity" else ()
        cfg = compose_tiny("dense", task_name, tmp_path, *extra)
        _, task, _ = runner.build(cfg, "dense", task_name)
        torch.manual_seed(0)
        report = cost.count(task.build_backbone().eval(), next(iter(task.eval_batches())).x)
        assert (report.macs, report.uncounted) == (macs, []), task_name
    torch.manual_seed(0)
    attn, cache, total = SelfAttention(16, 2).eval(), {}, 0
    total += cost.count(lambda: attn(torch.randn(3, 4, 16), cache)).macs  # causal prefix
    for _ in range(3):  # KV-cache steps
        total += cost.count(lambda: attn(torch.randn(3, 1, 16), cache)).macs
    assert total == 24768


def _explicit(q, k, v, mask):
    scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def test_sdpa_equals_explicit_attention():
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 2, 5, 8), torch.randn(2, 2, 7, 8), torch.randn(2, 2, 7, 8)
    pad = torch.zeros(2, 1, 1, 7, dtype=torch.bool)
    pad[0, ..., 5:] = True
    drop = nn.Dropout(0.1).eval()
    torch.testing.assert_close(attend(q, k, v, pad, drop), _explicit(q, k, v, pad))
    causal = torch.ones(5, 5, dtype=torch.bool).triu(1)
    torch.testing.assert_close(attend(q, q, q, None, drop, causal=True), _explicit(q, q, q, causal))
    # the encoder's padding mask
    layer = Attention(16, 2).eval()
    x, kpm = torch.randn(2, 6, 16), torch.zeros(2, 6, dtype=torch.bool)
    kpm[1, 4:] = True
    heads = [layer._heads(f(x)) for f in (layer.q, layer.k, layer.v)]
    ref = layer.o(_explicit(*heads, kpm[:, None, None, :]).transpose(1, 2).reshape(2, 6, 16))
    torch.testing.assert_close(layer(x, kpm), ref)
    # incremental decoding with the KV cache equals the causal forward over the whole prefix
    self_attn = SelfAttention(16, 2).eval()
    seq, cache = torch.randn(2, 5, 16), {}
    steps = torch.cat([self_attn(seq[:, i:i + 1], cache) for i in range(5)], dim=1)
    torch.testing.assert_close(steps, self_attn(seq))


def test_accumulation_beyond_the_batch_is_one_line(tmp_path):
    from bench.errors import UserError

    cfg = compose_tiny("dense", "imagenet", tmp_path, "accumulate=32")
    with pytest.raises(UserError, match=r"accumulate=32 exceeds the 16 training samples"):
        runner.run(cfg, "dense", "imagenet", "test")
    assert not list(tmp_path.rglob("*.csv"))


def _torchrun(tmp_path, *overrides: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--master_port", str(_free_port()),
            "-m", "bench", "run", *tiny_overrides("dense", "imagenet", tmp_path, "imagenet.batch_size=16",
                                                  "timing=false", *overrides)]


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT), "BENCH_QUIET": "1", "OMP_NUM_THREADS": "1"}


@pytest.mark.skipif(not hasattr(os, "fork"), reason="torchrun subprocesses")
def test_torchrun_bad_input_prints_one_line_and_every_rank_exits_2(tmp_path):
    done = subprocess.run(_torchrun(tmp_path, "imagenet.batch_size=15"), cwd=tmp_path, env=_env(),
                          capture_output=True, text=True, timeout=240)
    lines = [line for line in done.stderr.splitlines() if line.startswith("bench: error:")]
    assert lines == ["bench: error: the training batch size 15 does not divide into 2 processes; set the task's "
                     "batch_size to a multiple of the number of processes"], done.stderr[-2000:]
    assert "exitcode  : 2 " in done.stderr and "exitcode  : 1 " not in done.stderr, done.stderr[-2000:]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="torchrun subprocesses")
def test_sigterm_to_torchrun_saves_one_partial_and_prints_one_line(tmp_path):
    import signal
    import time

    proc = subprocess.Popen(_torchrun(tmp_path, "imagenet.train_steps=100000"), cwd=tmp_path, env=_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    cache = tmp_path / "cache" / "imagenet" / "dense"
    deadline = time.monotonic() + 120
    while not list(cache.glob("*.pt.lock")) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
    time.sleep(3)  # training steps under way
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=120)
    lines = [line for line in stderr.splitlines() if line.startswith("bench: error:")]
    assert len(lines) == 1 and lines[0].startswith("bench: error: terminated (SIGTERM) at step "), stderr[-3000:]
    [partial] = cache.glob("*.partial.pt")
    step = int(lines[0].split(" at step ")[1].split()[0])
    assert torch.load(partial, weights_only=False)["step"] == step > 0
    assert not list(cache.glob("*.lock")), "the stage lock was released"
