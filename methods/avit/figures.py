"""A-ViT figure: tokens kept per block as heatmaps over the image.

``python -m methods.avit.figures task=imagenet avit.ponder_weight=<w> [reports_dir=reports] <overrides>``
builds the A-ViT model of that config (its fine-tuning loads from the cache; an uncached one trains),
runs it on the real path over up to ``limit`` test images and writes
``<reports_dir>/avit_tokens_kept_<w>.png``:

- top row: for every block l, the share of test images in which each patch token is still active when
  block l runs (block 1 = all tokens), with the class token's share and the mean share in the title;
- bottom rows: test images (two per row, as many as fit), each beside its per-patch depth map (blocks each
  patch ran before halting; black = 1 block, the colour bar gives the rest).

Token sequences that are not a square grid of patches get per-position bar charts instead.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import torch
from torch import Tensor


def _grid(values: Tensor, cls: bool) -> np.ndarray | None:
    patches = values.shape[-1] - (1 if cls else 0)
    side = math.isqrt(patches)
    if side * side != patches:
        return None
    return values[-patches:].reshape(side, side).numpy()


def _display(image: Tensor) -> np.ndarray:
    img = image.detach().float().cpu()
    img = (img - img.min()) / (img.max() - img.min()).clamp_min(1e-8)
    return img[0].numpy() if img.shape[0] == 1 else img.permute(1, 2, 0).numpy()


@torch.inference_mode()
def collect(model, task, limit: int) -> tuple[Tensor, Tensor, Tensor]:
    """(per-token blocks run [N, T], the first batch's inputs, their predictions == targets)."""
    steps, first, correct = [], None, []
    seen = 0
    for batch in task.eval_batches():
        model(batch.x)
        steps.append(model.last.steps.cpu())
        if first is None:
            first = batch
        seen += len(batch)
        if seen >= limit:
            break
    return torch.cat(steps)[:limit], first.x, first.y


def tokens_kept_figure(model, task, path: Path, limit: int = 10000, n_images: int = 8) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from bench.report_plots import save_figure

    model.eval()
    steps, x, y = collect(model, task, limit)
    n_layers = len(model.encoder.blocks)
    cls = model.encoder.cfg.pool == "cls"
    kept = torch.stack([(steps > l).float().mean(dim=0) for l in range(n_layers)])  # [L, T]
    is_image = x.dim() == 4 and _grid(kept[0], cls) is not None
    with torch.inference_mode():
        model(x[:n_images])
    depth = model.last.steps.cpu()
    cols = max(n_layers, n_images // 2)
    fig, axes = plt.subplots(3, cols, figsize=(2.0 * cols, 6.4), squeeze=False)
    for ax in axes.flat:
        ax.axis("off")
    for l in range(n_layers):
        ax = axes[0][l]
        ax.axis("on")
        grid = _grid(kept[l], cls) if is_image else None
        if grid is not None:
            im = ax.imshow(grid, vmin=0, vmax=1, cmap="viridis")
            ax.set_xticks([])
            ax.set_yticks([])
        else:
            ax.bar(range(kept.shape[1]), kept[l].numpy())
            ax.set_ylim(0, 1)
        title = f"block {l + 1}: {100 * kept[l].mean():.0f}% kept"
        if cls:
            title += f"\ncls {100 * kept[l, 0]:.0f}%"
        ax.set_title(title, fontsize=8)
    if is_image:
        fig.colorbar(im, ax=axes[0][n_layers - 1], fraction=0.046, label="share of images")
    for j in range(min(n_images, 2 * (cols // 2))):
        row, col = 1 + j // (cols // 2), 2 * (j % (cols // 2))
        if col + 1 >= cols:
            continue
        img_ax, map_ax = axes[row][col], axes[row][col + 1]
        grid = _grid(depth[j], cls) if is_image else None
        if grid is None:
            continue
        img_ax.imshow(_display(x[j]), cmap="gray")
        img_ax.set_title(f"y={int(y[j])}", fontsize=8)
        shown = map_ax.imshow(grid, vmin=1, vmax=n_layers, cmap="magma")
        map_ax.set_title(f"depth (cls {int(depth[j, 0])})", fontsize=8)
        if col + 2 >= cols:
            fig.colorbar(shown, ax=map_ax, fraction=0.046, label="blocks run")
    pw = getattr(model, "ponder_weight", float("nan"))
    fig.suptitle(f"A-ViT (ponder weight {pw:g}, eps {model.epsilon:g}): tokens kept per block over "
                 f"{len(steps)} test images [{task.dataset}]", fontsize=9)
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> Path:
    from bench import config, runner

    args = list(sys.argv[1:] if argv is None else argv)
    own = {a.split("=", 1)[0]: a.split("=", 1)[1] for a in args if a.startswith("reports_dir=")}
    overrides = [a for a in args if not a.startswith(("reports_dir=", "method="))] + ["method=avit"]
    if not any(a.startswith("task=") for a in overrides):
        overrides.append("task=imagenet")
    task_name = next(a.split("=", 1)[1] for a in overrides if a.startswith("task="))
    cfg = config.compose(overrides)
    config.check_config(cfg, "avit", task_name)
    torch.set_num_threads(int(cfg.threads))
    _, task, method = runner.build(cfg, "avit", task_name)
    model = method.build().to(cfg.device).eval()
    model.ponder_weight = float(cfg.avit.ponder_weight)
    path = Path(own.get("reports_dir", "reports")) / f"avit_tokens_kept_{cfg.avit.ponder_weight:g}.png"
    tokens_kept_figure(model.cpu(), task, path)
    print(path)
    return path


if __name__ == "__main__":
    main()
