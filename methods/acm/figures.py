"""ACM figures: per-patch compute heatmaps (the paper's Fig. 6) and the per-image cost histogram (Fig. 8).

``draw_figures(model, task, reports_dir, results_dir=None)`` writes

- ``acm_heatmaps_<β>.png``: 8 test images, each above its heatmap of the fraction of learners executed
  per patch, averaged over every ACM of every layer (class token left out), on the real path;
- ``acm_cost_hist.png``: the distribution of per-image MACs as % of the dense model.  With ``results_dir``
  it overlays every ``acm`` row of the task found there (one histogram per β_target, from the per-sample
  files the runner wrote); without, it evaluates this model on up to ``limit`` test images.

Non-image inputs (token sequences) get one bar chart per sample instead of a heatmap.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch
from torch import Tensor, nn

from bench.api import Task
from methods.acm import modules as M


def _display(image: Tensor):
    """[C, H, W] normalised tensor → an array matplotlib shows (min-max scaled; gray for one channel)."""
    img = image.detach().float().cpu()
    img = (img - img.min()) / (img.max() - img.min()).clamp_min(1e-8)
    return img[0].numpy() if img.shape[0] == 1 else img.permute(1, 2, 0).numpy()


def _patch_grid(load: Tensor, model: nn.Module) -> Tensor | None:
    """[T] per-token load → [g, g] per-patch map (class token dropped), or None if tokens are not a grid."""
    tokens = load.shape[-1]
    cls = getattr(getattr(model, "cfg", None), "pool", "cls") == "cls"
    patches = tokens - 1 if cls else tokens
    side = math.isqrt(patches)
    if side * side != patches:
        return None
    return load[-patches:].reshape(side, side)


def _pick(batch_y: Tensor, n: int) -> list[int]:
    """Up to n indices with distinct labels first (variety), then the next ones in order."""
    seen, picked = set(), []
    for i, y in enumerate(batch_y.tolist()):
        if y not in seen:
            seen.add(y)
            picked.append(i)
        if len(picked) == n:
            return picked
    rest = [i for i in range(len(batch_y)) if i not in picked]
    return picked + rest[: n - len(picked)]


@torch.inference_mode()
def heatmaps(model: nn.Module, task: Task, path: Path, n_images: int = 8) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    model.eval()
    batch = next(iter(task.eval_batches()))
    idx = _pick(batch.y, n_images)
    x = batch.x[idx]
    logits = model(x)
    load = M.token_load(model).cpu()  # [n, T]
    macs = M.sample_macs(model).cpu()
    pred = task.predict(logits).cpu()
    beta = getattr(model, "acm_meta", {}).get("beta_target", float("nan"))
    n = len(idx)
    is_image = x.dim() == 4 and _patch_grid(load[0], model) is not None
    fig, axes = plt.subplots(2 if is_image else 1, n, figsize=(1.9 * n, 4.2 if is_image else 2.2),
                             squeeze=False)
    mappable = None
    for j in range(n):
        label = f"y={int(batch.y[idx[j]])} p={int(pred[j])}\n{macs[j] / 1e6:.2f} M MACs"
        if is_image:
            grid = _patch_grid(load[j], model).numpy()
            image = _display(x[j])
            h, w = image.shape[:2]
            axes[0, j].imshow(image, cmap="gray" if image.ndim == 2 else None)
            axes[0, j].set_title(label, fontsize=7)
            axes[1, j].imshow(image, cmap="gray" if image.ndim == 2 else None)
            mappable = axes[1, j].imshow(grid, cmap="inferno", alpha=0.65, vmin=0.0, vmax=1.0,
                                         extent=(0, w, h, 0), interpolation="nearest")
            axes[1, j].set_title(f"mean {float(load[j].mean()):.2f}", fontsize=7)
            for ax in axes[:, j]:
                ax.set_xticks([])
                ax.set_yticks([])
        else:
            axes[0, j].bar(range(load.shape[1]), load[j].numpy(), color="tab:orange")
            axes[0, j].set_ylim(0, 1)
            axes[0, j].set_title(label, fontsize=7)
            axes[0, j].set_xlabel("token", fontsize=7)
    fig.suptitle(f"ACM β_target={beta:g}: fraction of learners executed per "
                 f"{'patch' if is_image else 'token'} (mean over all ACMs; real path) — {task.dataset}",
                 fontsize=8)
    if mappable is not None:
        fig.colorbar(mappable, ax=axes[1, :].tolist(), fraction=0.02, pad=0.01)
    from bench.figures import save_figure

    save_figure(fig, path)
    plt.close(fig)
    return path


@torch.inference_mode()
def model_costs(model: nn.Module, task: Task, limit: int = 2000) -> Tensor:
    """Per-image MACs of ``model`` on the first ``limit`` test samples (real path)."""
    model.eval()
    costs, seen = [], 0
    for batch in task.eval_batches():
        model(batch.x)
        costs.append(M.sample_macs(model).cpu())
        seen += len(batch)
        if seen >= limit:
            break
    return torch.cat(costs)[:limit]


def _results_costs(results_dir: Path, task_name: str) -> dict[str, "object"]:
    """{label: per-sample cost in % of dense} for every acm row of the task in ``results_dir``."""
    from bench import results

    try:
        frame = results.load(results_dir)
    except FileNotFoundError:
        return {}
    if frame is None or len(frame) == 0:
        return {}
    rows = frame[(frame["method"] == "acm") & (frame["task"] == task_name)]
    several_variants = rows["variant"].nunique() > 1
    pooled: dict[str, list] = {}
    for _, row in rows.sort_values(["variant", "knob_value", "seed"]).iterrows():
        try:
            samples = results.load_samples(results_dir, task_name, "acm", row["run_id"])
        except FileNotFoundError:
            continue
        # rows of different variants (e.g. loss weights) would share a β label: name what differs
        alpha = next((part for part in str(row["variant"]).split(";") if part.startswith("alpha=")), "")
        label = f"β={row['knob_value']}{f', {alpha}' if several_variants and alpha else ''}"
        entry = pooled.setdefault(label, [[], [], [], row["metric"]])  # costs, qualities, seeds, metric
        entry[0].append(100.0 * samples["macs"].to_numpy() / float(row["macs_dense"]))
        entry[1].append(float(row["quality"]))
        entry[2].append(str(row["seed"]))
    out = {}
    for label, (costs, qualities, seeds, metric) in pooled.items():  # seeds pooled into one histogram
        seed_text = f", seeds {','.join(seeds)}" if len(seeds) > 1 else ""
        out[f"{label} ({np.mean(qualities):.3f} {metric}{seed_text})"] = np.concatenate(costs)
    return out


def cost_histogram(model: nn.Module, task: Task, path: Path, results_dir: Path | None = None,
                   limit: int = 2000) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = _results_costs(Path(results_dir), task.name) if results_dir is not None else {}
    source = f"per-sample rows in {results_dir}"
    if not series:
        costs = model_costs(model, task, limit)
        tokens = M.acm_layers(model)[0].last_k.shape[-1]
        dense = task.build_backbone().macs(tokens)
        beta = getattr(model, "acm_meta", {}).get("beta_target", float("nan"))
        series = {f"β={beta:g}": (100.0 * costs.double() / dense).numpy()}
        source = f"this model, first {len(costs)} test samples"
    fig, ax = plt.subplots(figsize=(6, 3.4))
    for label, values in series.items():
        ax.hist(values, bins=40, alpha=0.55, label=f"{label}: mean {values.mean():.1f}%")
    ax.set_xlabel("per-image cost (% of dense MACs, gates included)")
    ax.set_ylabel("images")
    ax.set_title(f"ACM per-image cost — {task.dataset}\n({source})", fontsize=8)
    ax.legend(fontsize=7)
    from bench.figures import save_figure

    save_figure(fig, path)
    plt.close(fig)
    return path


def draw_figures(model: nn.Module, task: Task, reports_dir: str | Path, results_dir: str | Path | None = None,
                 n_images: int = 8, limit: int = 2000) -> list[str]:
    """Write ``acm_heatmaps_<β>.png`` and ``acm_cost_hist.png`` under ``reports_dir``; return their paths."""
    out = Path(reports_dir)
    beta = getattr(model, "acm_meta", {}).get("beta_target", float("nan"))
    paths = [heatmaps(model, task, out / f"acm_heatmaps_{beta:g}.png", n_images),
             cost_histogram(model, task, out / "acm_cost_hist.png",
                            Path(results_dir) if results_dir is not None else None, limit)]
    return [str(p) for p in paths]


def main(argv: list[str] | None = None) -> list[str]:
    """``python -m methods.acm.figures [reports_dir=reports] [results_dir=results] <bench overrides>``:
    build the ACM model of the given config (its stages load from the cache; uncached stages train) and
    draw its figures, e.g. ``python -m methods.acm.figures task=imagenet acm.beta_target=0.6``."""
    import sys

    from bench import config, runner

    args = list(sys.argv[1:] if argv is None else argv)
    own = {a.split("=", 1)[0]: a.split("=", 1)[1] for a in args if a.startswith(("reports_dir=", "results_dir="))}
    overrides = [a for a in args if not a.startswith(("reports_dir=", "results_dir="))]
    overrides = [a for a in overrides if not a.startswith("method=")] + ["method=acm"]
    task_name = next((a.split("=", 1)[1] for a in overrides if a.startswith("task=")), "imagenet")
    if not any(a.startswith("task=") for a in overrides):
        overrides.append(f"task={task_name}")
    cfg = config.compose(overrides)
    config.check_config(cfg, "acm", task_name)
    torch.set_num_threads(int(cfg.threads))
    _, task, method = runner.build(cfg, "acm", task_name)
    model = method.build().to(cfg.device).eval()
    paths = draw_figures(model.cpu(), task, own.get("reports_dir", "reports"), own.get("results_dir", "results"))
    print("\n".join(paths))
    return paths


if __name__ == "__main__":
    main()
