"""Figure helpers shared by every producer of figures (the report, the kernel benchmark, task and method
figures): no dependency on the report, so a producer of rows can draw without importing it."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

FILE_MODE = 0o644  # mkstemp creates 0600; figures are meant to be read by everyone (as result files)


def save_figure(fig, path: Path) -> None:
    """Save a PNG atomically (temporary file in the same directory, then os.replace).

    The PNG carries no timestamp, so redrawing the same data gives the same bytes.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    os.chmod(tmp, FILE_MODE)
    try:
        fig.savefig(tmp, format="png", dpi=130, bbox_inches="tight")
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def token_map_figure(samples, title: str, path: Path, n_images: int = 8, label: str = "share of compute") -> Path | None:
    """Inputs above their per-token compute maps, from a samples file's ``input_preview`` and
    ``token_compute`` fields (the first samples of a run; bench/runner.py).  Up to ``n_images`` samples
    with distinct targets first.  Token maps whose length is a square, or a square plus one leading class
    token, are drawn over the image's patch grid; others as bars.  None when the samples hold no maps."""
    import math

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from bench.api import decode_image

    if "token_compute" not in samples:
        return None
    shown = samples[samples["token_compute"].fillna("").astype(str).str.len() > 0]
    if shown.empty:
        return None
    picked, seen = [], set()
    for i, target in zip(shown.index, shown["target"]):
        if target not in seen:
            seen.add(target)
            picked.append(i)
    picked += [i for i in shown.index if i not in picked]
    picked = picked[:n_images]
    n = len(picked)
    images = [decode_image(str(shown.at[i, "input_preview"])) if str(shown.at[i, "input_preview"]) not in
              ("", "nan") else None for i in picked]
    with_images = all(img is not None for img in images)
    fig, axes = plt.subplots(2 if with_images else 1, n, figsize=(1.9 * n, 4.2 if with_images else 2.2),
                             squeeze=False)
    mappable = None
    for j, i in enumerate(picked):
        values = np.array([float(v) for v in str(shown.at[i, "token_compute"]).split()])
        side = math.isqrt(len(values))
        grid = values.reshape(side, side) if side * side == len(values) else None
        if grid is None and math.isqrt(len(values) - 1) ** 2 == len(values) - 1:  # a class token first
            side = math.isqrt(len(values) - 1)
            grid = values[1:].reshape(side, side)
        caption = f"y={shown.at[i, 'target']} p={shown.at[i, 'prediction']}\n{float(shown.at[i, 'macs']) / 1e6:.2f} M MACs"
        if with_images and grid is not None:
            image = images[j]
            h, w = image.shape[:2]
            for ax in axes[:, j]:
                ax.imshow(image, cmap="gray" if image.ndim == 2 else None)
                ax.set_xticks([])
                ax.set_yticks([])
            mappable = axes[1, j].imshow(grid, cmap="inferno", alpha=0.65, vmin=0.0, vmax=1.0, extent=(0, w, h, 0),
                                         interpolation="nearest")
            axes[0, j].set_title(caption, fontsize=7)
            axes[1, j].set_title(f"mean {values.mean():.2f}", fontsize=7)
        else:
            ax = axes[-1, j]
            ax.bar(range(len(values)), values, color="tab:orange")
            ax.set_ylim(0, 1)
            ax.set_title(caption, fontsize=7)
            ax.set_xlabel("token", fontsize=7)
            if with_images:
                axes[0, j].axis("off")
    fig.suptitle(title, fontsize=8)
    if mappable is not None:
        fig.colorbar(mappable, ax=axes[1, :].tolist(), fraction=0.02, pad=0.01, label=label)
    save_figure(fig, path)
    plt.close(fig)
    return path
