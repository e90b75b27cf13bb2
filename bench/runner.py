"""The flow of one run, the same for every method:

config → task → protocol.train(method) (dense base model and method stages, cached and resumable) → for each
knob value: evaluate quality on the real path with per-sample MACs from the logged decisions; count
MACs with the dispatch-level counter on a few batches (a separate pass); time batch-1 latency and
large-batch throughput (another pass, no counters attached) → one row per knob value in ``results/``.
Knob values that already have a row made under today's training protocol are skipped (an interrupted
sweep resumes), unless ``force=true``.

Scale: evaluation streams the task's evaluation batches, holding one batch at a time (only
per-sample predictions and columns are kept).  Under data parallelism every rank trains; then rank 0
alone evaluates, counts, times and writes rows, as one process on one device (bench/distributed.py), and
the other ranks return.  Evaluation, counting and timing run the model cast to the run's ``precision``
(bench/precision.py); rows record it, the counter's and the timer's dtype, and the number of training
processes.
"""

from __future__ import annotations

import logging
import math
import os
import time
from pathlib import Path
from typing import Any

import torch
from omegaconf import OmegaConf

from bench import (cost, distributed, paths, precision as amp, protocol, provenance, registry, results, throughput,
                   versions)
from bench.api import Batch, Method, Task
from bench.errors import UserError
from bench.progress import progress
from bench.run import RunContext, cpu_threads, plain
from bench.results import BUSY_OTHER_CPUS
from bench.timing import OtherCpus, Timing, measure_against_dense

log = logging.getLogger("bench")

# Samples whose per-token decisions (``token_compute``) and input (``input_preview``) the samples file keeps,
# for the figures `bench report` draws from rows (e.g. ACM's per-patch heatmaps).
PREVIEW_SAMPLES = 16

# Keys that do not change what a run computes (excluded from the config hash): see bench/results.py.
NON_RESULT_KEYS = results.NON_RESULT_KEYS


def config_hash(cfg: Any, method: str, task: str) -> str:
    return results.identity_hash(plain(cfg), method, task)


def build(cfg: Any, method_name: str, task_name: str, command: str = "") -> tuple[RunContext, Task, Method]:
    run = RunContext(cfg, method_name, task_name, command)
    task_cls = registry.load_impl(registry.task_spec(task_name).impl)
    method_cls = registry.load_impl(registry.method_spec(method_name).impl)
    task = task_cls(cfg[task_name], run)
    return run, task, method_cls(cfg[method_name], task, run)


def _batches(task: Task, limit: int):
    """The first ``limit`` evaluation samples (all when 0), one batch at a time (a generator)."""
    seen = 0
    for batch in task.eval_batches():
        if limit and seen >= limit:
            return
        if limit and seen + len(batch) > limit:
            keep = limit - seen
            batch = Batch(batch.x[:keep], batch.y[:keep], {k: v[:keep] for k, v in batch.meta.items()})
        seen += len(batch)
        yield batch


@torch.inference_mode()
def evaluate(method: Method, model: torch.nn.Module, task: Task, *, limit: int, device: str,
             precision: str = "fp32"):
    """Quality on the real path and per-sample MACs from the method's decision log.

    Streams: one evaluation batch is held at a time (the split is never materialised)."""
    import pandas as pd

    columns: dict[str, list[torch.Tensor]] = {}
    previews: list[str] = []  # token maps and input previews of the first PREVIEW_SAMPLES samples
    maps: list[str] = []
    preds, targets = [], []
    bar = progress(desc="evaluate", unit="batches")
    for batch in _batches(task, limit):
        bar.update(1)
        batch = batch.to(device)
        # the model's precision (bench/precision.py): inputs cast like the model, costs from the same forward
        result = method.infer(model, Batch(amp.cast_input(batch.x, precision), batch.y, batch.meta))
        preds.append(task.predict(result.outputs).cpu())
        targets.append(batch.y.cpu())
        keep = max(0, PREVIEW_SAMPLES - len(maps))
        if keep:
            shown = task.preview(batch.x[:keep]) if result.token_compute is not None else None
            tokens = result.token_compute[:keep].cpu() if result.token_compute is not None else None
            for i in range(min(keep, len(batch))):
                maps.append(" ".join(f"{v:.3g}" for v in tokens[i].tolist()) if tokens is not None else "")
                previews.append(shown[i] if shown is not None else "")
        extra = {"macs": result.macs, **batch.meta, **result.columns}
        for key, value in extra.items():
            columns.setdefault(key, []).append(value.detach().cpu())
    bar.close()
    predictions, target = torch.cat(preds), torch.cat(targets)
    quality = task.score(predictions, target)
    table = {**task.sample_table(predictions, target), "score": quality.per_sample.numpy(), **quality.columns}
    table.update({k: torch.cat(v).numpy() for k, v in columns.items()})
    if any(maps):  # per-token decisions (and the inputs they refer to) for figures: first samples only
        n = len(predictions)
        table["token_compute"] = (maps + [""] * n)[:n]
        table["input_preview"] = (previews + [""] * n)[:n]
    return quality, pd.DataFrame(table)


@torch.inference_mode()
def counted_macs(method: Method, model: torch.nn.Module, task: Task, *, batches: int, device: str,
                 precision: str = "fp32"):
    """Mean MACs per sample from the counter, and from the decision log on the same batches."""
    counted, logged, samples, uncounted = 0, 0.0, 0, set()
    for i, batch in enumerate(task.eval_batches()):
        if i >= batches:
            break
        batch = batch.to(device)
        reports: list[cost.CostReport] = []

        def counted_forward(m: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
            with cost.count_macs() as counter:  # the forward alone is counted, not the log's arithmetic
                out = task.infer(m, x)
            reports.append(counter.report)
            return out

        result = method.infer(model, Batch(amp.cast_input(batch.x, precision), batch.y, batch.meta),
                              forward=counted_forward)
        counted += reports[0].macs
        uncounted.update(reports[0].uncounted)
        logged += float(result.macs.sum())
        samples += len(batch)
    return counted / samples, logged / samples, sorted(uncounted)


def dense_reference_macs(task: Task, *, batches: int, device: str, precision: str = "fp32") -> float:
    """Mean MACs per sample of the task's dense reference model, from the counter: on the first ``batches``
    evaluation batches, or on all of them for a model whose cost depends on its inputs' content
    (``input_dependent_cost``, e.g. a decoder whose cost depends on what it generates)."""
    model = amp.cast_model(task.reference_model().to(device).eval(), precision)
    if getattr(model, "input_dependent_cost", False):
        batches = 0
    total, samples = 0, 0
    for i, batch in enumerate(task.eval_batches()):
        if batches and i >= batches:
            break
        total += cost.count(lambda x: task.infer(model, x), amp.cast_input(batch.to(device).x, precision)).macs
        samples += len(batch)
    return total / samples


def check_costs(method: Method, model: torch.nn.Module, task: Task, values: list[Any], *, where: str,
                knob: str, batches: int, device: str, allow_mismatch: bool,
                precision: str = "fp32") -> dict[str, tuple[float, float, list[str], str]]:
    """Counter vs decision log for every knob value, before anything is evaluated or written.

    Returns {str(value): (counted, logged, uncounted ops, cost_check label)}.  A disagreement over 1%
    raises a UserError (one line; no row is written) unless ``allow_mismatch``, in which case the
    label records it in the row.
    """
    checks = {}
    for value in values:
        method.set_knob(model, value)
        counted, logged, uncounted = counted_macs(method, model, task, batches=batches, device=device,
                                                  precision=precision)
        gap = (logged - counted) / max(counted, 1.0)
        label = "agree"
        if abs(gap) > 0.01:
            message = (f"{where} at {knob}={value}: the MAC counter "
                       f"({counted:.4g} per sample) and the method's decision log ({logged:.4g}) disagree by "
                       f"{gap:+.1%} (more than 1%)")
            if not allow_mismatch:
                raise UserError(f"{message}; no rows written. Fix the method's cost accounting, or re-run "
                                "with allow_cost_mismatch=true to write rows marked as such")
            log.warning("%s; writing the rows anyway (allow_cost_mismatch=true)", message)
            label = f"MISMATCH allowed: counter {counted:.6g} vs log {logged:.6g} ({gap:+.2%})"
        checks[str(value)] = (counted, logged, uncounted, label)
    return checks


def own_training_time(method: Method, run_ctx: RunContext) -> tuple[float, float]:
    """(seconds of the row's own stages, seconds of the dense base it starts from or NaN), from what the run
    charged so far: a method fine-tuning the base counts its stages only; the dense base's own row counts it."""
    plan = method.training_plan
    if plan is None or plan.starts_from != "base":
        return run_ctx.train_time_s, math.nan
    base = run_ctx.base_time_s
    own = run_ctx.train_time_s - base if any(p.steps for p in plan.stages) else run_ctx.train_time_s
    return own, base


def training_samples(method: Method) -> tuple[int, int]:
    """(samples the row's own stages trained on: optimizer steps x batch, samples of the dense base it starts
    from or 0); the dense base's own row (no stages of its own) counts the base's."""
    plan = method.training_plan
    if plan is None:
        return 0, 0
    own = sum(p.steps for p in plan.stages) * plan.batch_size
    base = int(method.task.base_budget()["steps"]) * plan.batch_size if plan.starts_from == "base" else 0
    return (own, base) if own else (base, 0)


def base_step_s(task: Task, batch_size: int, device: str, steps: int = 5) -> float:
    """Seconds per optimizer step of the task's dense base model on this machine (median of ``steps`` after
    two warm-up steps; the global random state is left as it was)."""
    with torch.random.fork_rng(devices=[]):
        model = task.build_backbone().to(device).train()
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
        batch = task.train_batch(0, batch_size).to(device)
        times = []
        for _ in range(steps + 2):
            start = time.perf_counter()
            optimizer.zero_grad(set_to_none=True)
            task.loss(model(batch.x), batch).backward()
            optimizer.step()
            times.append(time.perf_counter() - start)
    return float(sorted(times[2:])[len(times[2:]) // 2])


def loads_dense_base(task: Task, cfg: Any) -> bool:
    """Whether a run loads the task's trained dense base after training, whatever its method starts from: to
    time the model beside it, or as the counted reference of a task whose cost depends on the outputs."""
    return bool(cfg.timing) or type(task).reference_model is not Task.reference_model


def plan_line(method: Method, task: Task, cfg: Any) -> str:
    """The run's plan in one line: what is cached, shipped or trained, and the training time estimated from
    the base model's step time measured now, each method stage's step at its cost relative to the base's as
    measured in ``<results_dir>/throughput`` (:func:`training_seconds`)."""
    the_plan = protocol.plan(method)
    stages = protocol.plan_status(method, the_plan, loads_dense_base(task, cfg))
    text, steps = protocol.describe_stages(stages, the_plan)
    if steps:
        threads, world = method.run.train_threads, distributed.world()
        with cpu_threads(threads):  # measured as the stages will train: each rank on its shard of the batch
            per_step = base_step_s(task, -(-the_plan.batch_size // world), method.run.device)
        total, unmeasured = training_seconds(method, stages, per_step, Path(cfg.results_dir) / throughput.DIR)
        when = f"{total:.0f} s" if total < 90 else f"{total / 60:.0f} min"
        device = method.run.device
        where = f"on {threads} thread(s)" if torch.device(device).type == "cpu" else f"on {device}"
        if world > 1:
            where += f" in each of {world} processes on a 1/{world} shard of the batch, not counting the all-reduce"
        costs = (f"{', '.join(unmeasured)} at a base step's cost: a method's steps may cost more" if unmeasured
                 else f"the method's steps at their cost relative to it in {cfg.results_dir}/{throughput.DIR}")
        text += f"; about {when} of training here ({per_step * 1e3:.0f} ms per base-model step {where}; {costs})"
    return f"plan: {text}; then evaluation{' and timing' if cfg.timing else ''}"


def training_seconds(method: Method, stages: list[protocol.StageStatus], base_step: float,
                     folder: Path) -> tuple[float, list[str]]:
    """The seconds to train what is left of ``stages`` (:func:`bench.protocol.plan_status`): each step at
    ``base_step`` (the dense base's, measured now) times its stage's cost relative to a base step, from the
    training-throughput rows in ``folder`` at the run's training threads (ratios measured on one machine, so
    they carry over to this one; on the CPU only).  Also the names of the method stages without a measured
    cost, counted at a base step's."""
    run = method.run
    on_cpu = torch.device(run.device).type == "cpu"
    rates, base_rates = throughput.rates(folder) if on_cpu else ({}, {})
    total, unmeasured = 0.0, []
    for stage in (s for s in stages if s.steps_left):
        cost = 1.0 if stage.base else throughput.cost_relative_to_base(
            rates, base_rates, method.task.name, f"{run.method}:{stage.name}", run.train_threads)
        if cost is None:
            unmeasured.append(stage.name)
        total += stage.steps_left * base_step * (cost or 1.0)
    return total, unmeasured


def run(cfg: Any, method_name: str, task_name: str, command: str) -> list[str]:
    """Run one configuration; returns the paths of the rows written."""
    paths.check_run_outputs(cfg)  # before any work: an unwritable results_dir fails now, not after training
    torch.set_num_threads(int(cfg.threads))
    torch.manual_seed(int(cfg.seed))
    run_ctx, task, method = build(cfg, method_name, task_name, command)
    spec = registry.method_spec(method_name)
    chash = config_hash(cfg, method_name, task_name)
    pending = pending_values(cfg, method, method_name, task_name)
    if not pending:
        log.warning("every knob value of this run already has a row (config %s); force=true re-runs", chash)
        return []
    # Provenance is taken before any work: the code that runs is the code checked out now.
    sha, dirty = provenance.git_sha(), provenance.git_dirty()
    t0 = time.perf_counter()
    device, precision = run_ctx.device, str(cfg.precision)
    log.info("%s", plan_line(method, task, cfg))
    model = protocol.train(method).to(device).eval()
    # The row's training time: its own stages (the base's time in its own column when the model starts from
    # it), not the dense base loaded below only as the timing's or counting's reference.
    train_time_s, base_time_s = own_training_time(method, run_ctx)
    train_samples, base_train_samples = training_samples(method)
    world = distributed.world()
    if world > 1:
        # Every rank trains what rank 0 will load below (the dense base for timing, a trained reference),
        # then rank 0 goes on alone as one process and the others are done.
        if loads_dense_base(task, cfg):
            run_ctx.base_model(task)
        main = distributed.is_main()
        distributed.barrier()
        distributed.shutdown()
        if not main:
            return []
    dtype = amp.dtype_name(precision)
    model = amp.cast_model(model, precision)  # evaluation, counting and timing in the run's dtype
    params = sum(p.numel() for p in model.parameters())
    macs_dense = dense_reference_macs(task, batches=cfg.count_batches, device=device, precision=precision)
    checks = check_costs(method, model, task, pending, where=f"{method_name} on {task_name}", knob=spec.knob,
                         batches=cfg.count_batches, device=device,
                         allow_mismatch=bool(cfg.allow_cost_mismatch), precision=precision)
    # The task's dense base model, timed beside every knob value in the same process.
    dense = amp.cast_model(run_ctx.base_model(task).to(device).eval(), precision) if cfg.timing else None
    # what every row of this run shares; a row adds its knob value's (the variant may name the value)
    shared = dict(
        method=method_name, task=task_name, dataset=task.dataset, knob_name=spec.knob, knob_kind=spec.knob_kind,
        seed=int(cfg.seed), metric=task.metric, higher_is_better=task.higher_is_better,
        metric_signature=task.metric_signature, macs_dense=macs_dense, timing_threads=int(cfg.threads),
        timing_cpus=os.cpu_count() or 0, code_version=versions.tag(versions.of(task, method)), params=params,
        train_time_s=train_time_s, base_train_time_s=base_time_s,
        config_hash=chash, command=command, git_sha=sha, git_dirty=dirty, versions=provenance.versions(),
        device=provenance.device_name(device), precision=precision, count_dtype=dtype,
        timing_dtype=dtype if cfg.timing else "", world_size=world, recipe=run_ctx.recipe,
        train_samples=train_samples, base_train_samples=base_train_samples)
    validation = task.validation_task()
    written = []
    for value in pending:
        method.set_knob(model, value)
        quality, samples = evaluate(method, model, task, limit=cfg.eval_limit, device=device, precision=precision)
        val_quality, val_n = _validation_quality(method, model, validation, cfg, device, precision)
        counted, _, uncounted, cost_check = checks[str(value)]
        timing, load_avg, other_cpus = _time_value(cfg, model, dense, task, device, precision)
        summary = cost.percentile_summary(torch.tensor(samples["macs"].to_numpy(copy=True)))
        row_id = _row_id(chash, spec.knob, value, cfg.seed)
        twin = _identical_row(cfg.results_dir, task_name, method_name, chash, spec.knob, value, cfg.seed,
                              quality.value, summary, samples)
        if twin is not None:
            log.warning("%s=%s: quality, cost and samples are identical to the existing row %s; no new row written",
                        spec.knob, value, twin)
            continue
        row = results.ResultRow(
            **shared, knob_value=str(value), variant=method.variant(), train_budget=method.train_budget(),
            quality=quality.value, n_eval=len(samples),
            extra_metrics=";".join(f"{k}={v:.6g}" for k, v in quality.extra.items()),
            **summary, cost_pct_dense=100.0 * summary["macs_mean"] / macs_dense, macs_counted_mean=counted,
            cost_check=cost_check, uncounted_ops=";".join(uncounted), **_timing_fields(timing),
            timing_load_avg=load_avg, timing_other_cpus=other_cpus, run_id=row_id, timestamp=provenance.timestamp(),
            val_quality=val_quality, val_n=val_n)
        written.append(str(results.append(cfg.results_dir, row, row_id, samples,
                                          config_yaml=OmegaConf.to_yaml(cfg, resolve=True))))
        log.info("%s %s %s=%s: %s=%.4f, %.4g MACs/sample (%.1f%% of dense), %s", task_name, method_name,
                 spec.knob, value, task.metric, quality.value, summary["macs_mean"], row.cost_pct_dense,
                 timing_text(timing, load_avg, os.cpu_count() or 0, other_cpus) if cfg.timing else "not timed")
    log.info("done in %.1f s; rows: %s", time.perf_counter() - t0, ", ".join(written))
    return written



def _validation_quality(method: Method, model: torch.nn.Module, validation: Task | None, cfg: Any, device: str,
                        precision: str) -> tuple[float, int]:
    """The knob value's quality on the task's validation split and its size; (NaN, 0) without one."""
    if validation is None:
        return float("nan"), 0
    with torch.random.fork_rng(devices=[]):  # leaves the random state as the test split left it
        checked, checked_samples = evaluate(method, model, validation, limit=cfg.eval_limit, device=device,
                                            precision=precision)
    return checked.value, len(checked_samples)


def _time_value(cfg: Any, model: torch.nn.Module, dense: torch.nn.Module | None, task: Task, device: str,
                precision: str) -> tuple[Timing, float, float]:
    """The knob value's timing against the dense base in this process, the load when it started, and the
    CPUs other processes kept busy while it ran (:class:`bench.timing.OtherCpus`); NaN timings when the run
    does not time."""
    if not cfg.timing:
        return Timing(*(float("nan"),) * 3, 0), float("nan"), float("nan")
    load_avg = os.getloadavg()[0]  # the machine's load when this value's timing starts
    others = OtherCpus()
    timing = measure_against_dense(model, dense, lambda b: task.example_input(b).to(device),
                                   batch=cfg.timing_batch, threads=int(cfg.threads),
                                   min_run_time=float(cfg.timing_min_run_s), rounds=int(cfg.timing_rounds),
                                   call=lambda m, x: _infer_in(precision, task, m, x),
                                   device=torch.device(device).type)
    return timing or Timing(*(float("nan"),) * 3, 0), load_avg, others.stop()


def _timing_fields(timing: Timing) -> dict[str, Any]:
    """A row's timing columns."""
    return dict(latency_b1_ms=timing.latency_b1_ms, latency_b1_iqr_ms=timing.latency_b1_iqr_ms,
                throughput_per_s=timing.throughput_per_s, throughput_batch=timing.throughput_batch,
                dense_latency_b1_ms=timing.dense_latency_b1_ms, dense_throughput_per_s=timing.dense_throughput_per_s,
                latency_b1_ratio=timing.latency_b1_ratio, throughput_ratio=timing.throughput_ratio,
                timing_rounds=timing.rounds)

WIDE_SPREAD = 0.25  # a batch-1 latency whose IQR exceeds this share of its median is called noisy


def timing_text(timing: Timing, load_avg: float, cpus: int, other_cpus: float = math.nan) -> str:
    """The console's timing ratios, with the caveats the report applies: a loaded machine (other processes
    keeping more than :data:`bench.results.BUSY_OTHER_CPUS` busy while it ran; where that was not measured,
    a 1-minute load average above the CPU count) or a wide spread makes the ratios noise, and the line says
    so."""
    text = f"batch-1 latency {timing.latency_b1_ratio:.2f}x dense, throughput {timing.throughput_ratio:.2f}x dense"
    caveats = []
    if math.isfinite(other_cpus):
        if other_cpus > BUSY_OTHER_CPUS:
            caveats.append(f"other processes kept {other_cpus:.2f} CPUs busy while it was timed")
    elif cpus and load_avg > cpus:
        caveats.append(f"timed at load {load_avg:.1f} on {cpus} CPUs")
    spread = timing.latency_b1_iqr_ms / timing.latency_b1_ms if timing.latency_b1_ms > 0 else math.nan
    if spread > WIDE_SPREAD:
        caveats.append(f"latency IQR {spread:.0%} of its median")
    if caveats:
        text += f" (NOISY: {'; '.join(caveats)}; re-time on a quiet machine before reading it)"
    return text


def _infer_in(precision: str, task: Task, model: torch.nn.Module, x: torch.Tensor) -> Any:
    """The task's evaluation forward on an input in the run's dtype (what the timer times)."""
    return task.infer(model, amp.cast_input(x, precision))


def pending_values(cfg: Any, method: Method, method_name: str, task_name: str) -> list[Any]:
    """The knob values of this run that have no row yet (every value with ``force=true``): a run whose list
    is empty is skipped."""
    knob, chash = registry.method_spec(method_name).knob, config_hash(cfg, method_name, task_name)
    code = versions.tag(versions.of(method.task, method))
    return [v for v in method.knob_values()
            if cfg.force or not _point_exists(cfg.results_dir, task_name, method_name, chash, knob, v, cfg.seed,
                                              code)]


def _row_id(chash: str, knob: str, value: Any, seed: int) -> str:
    slug = "".join(c if c.isalnum() or c in ".-" else "_" for c in str(value))
    return f"{chash}-{knob}{slug}-s{seed}"


# --- row identity ---------------------------------------------------------------------------------------
def _point_exists(results_dir: Any, task: str, method: str, chash: str, knob: str, value: Any, seed: int,
                  code: str = "") -> bool:
    """A row of this point exists: its own row id, or an older row of the same knob value and seed whose
    config (read from its ``config.yaml``, without today's non-result keys) has the same identity hash, in
    either case made under today's training protocol (:data:`results.PROTOCOL_VERSION`) and by today's
    behaviour versions ``code`` (a row's ``code_version``; :func:`results.made_by_other_versions`): a point
    whose config did not change but whose protocol or versions did is run again."""
    own = results.row_dir(results_dir, task, method) / f"{_row_id(chash, knob, value, seed)}.csv"
    suffix = _row_id("", knob, value, seed)
    candidates = [own] if own.exists() else []
    candidates += [p for p in results.same_point_rows(results_dir, task, method, suffix)
                   if p != own and results.stored_identity(p, method, task, "") == chash]
    return any(results.row_protocol(p) == results.PROTOCOL_VERSION
               and not results.made_by_other_versions(results.row_code_version(p), code) for p in candidates)


def _identical_row(results_dir: Any, task: str, method: str, chash: str, knob: str, value: Any, seed: int,
                   quality: float, summary: dict[str, float], samples: Any) -> str | None:
    """An existing row of this point (same identity hash, knob value, seed and protocol) with the same quality, MAC
    summary and per-sample table (as written: CSV text), or None.  Re-running such a point (force=true, or
    after a code change that does not change its numbers) adds no second file."""
    import gzip

    import pandas as pd

    suffix = _row_id("", knob, value, seed)
    text = None
    for path in results.same_point_rows(results_dir, task, method, suffix):
        if results.stored_identity(path, method, task, "") != chash or results.row_protocol(path) != results.PROTOCOL_VERSION:
            continue  # another point, or a row of an older protocol (which the new row replaces)
        old = pd.read_csv(path).iloc[0]
        if float(old["quality"]) != float(quality) or any(float(old[k]) != float(v) for k, v in summary.items()):
            continue
        sample_file = path.with_name(path.name[:-len(".csv")] + ".samples.csv.gz")
        if not sample_file.exists():
            continue
        if text is None:
            text = samples.to_csv(index=False)
        with gzip.open(sample_file, "rt", newline="") as handle:
            if handle.read() == text:
                return str(path)
    return None
