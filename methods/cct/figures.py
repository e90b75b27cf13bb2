"""CCT figure, drawn by ``bench report`` from rows only: gate usage by layer and unit at every budget.

It reads every ``cct`` row of one (task, dataset) and its per-sample file (columns ``use_l<layer>_<unit>`` = share of
the sample's tokens that ran the unit: kv = K/V projections, att = the attention sublayer, ffn<i> =
FFN slice i; encoder–decoder tasks: ``use_e<layer>_<unit>`` and ``use_d<layer>_<unit>`` for encoder and
decoder blocks, with xkv/xatt = the cross-attention's K/V and query sublayer) and writes

- ``<stem>_cct_gate_usage.png``: one heatmap per budget (layers × units, seeds pooled), titled with the
  realised share of the gated cost and top-1; one row of heatmaps per setting (the rows' variant and training
  recipe: a model trained under another recipe is another model, never pooled with it);
- ``<stem>_cct_gate_usage.csv``: the table behind it.
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from bench import results
from bench.report.plots import save_figure

COLUMN = re.compile(r"use_([led])(\d+)_(\w+)")
STACK = {"l": "layer", "e": "enc", "d": "dec"}


def table(rows: pd.DataFrame, results_dir: Path) -> pd.DataFrame:
    rows = rows[rows["method"] == "cct"]
    records = []
    for row in rows.itertuples(index=False):
        try:
            samples = results.load_samples(results_dir, row.task, row.method, row.run_id)
        except FileNotFoundError:
            continue
        for column in samples.columns:
            match = COLUMN.fullmatch(column)
            if match:
                stack = match.group(1)
                gated = float(samples["gated_fraction"].mean()) if "gated_fraction" in samples else float("nan")
                records.append({"dataset": row.dataset, "setting": _setting(row), "budget": str(row.knob_value),
                                "seed": row.seed,
                                "layer": f"{STACK[stack]} {int(match.group(2)) + 1}",
                                "order": (stack == "d", int(match.group(2))), "unit": match.group(3),
                                "usage": float(samples[column].mean()), "gated_fraction": gated, "metric": row.metric,
                                "quality": float(row.quality), "cost_pct_dense": float(row.cost_pct_dense)})
    if not records:
        return pd.DataFrame()
    data = pd.DataFrame(records)
    data["order"] = data["order"].map(lambda o: 1000 * int(o[0]) + o[1])
    return (data.groupby(["dataset", "setting", "budget", "order", "layer", "unit", "metric"], as_index=False)
            .agg(usage=("usage", "mean"), usage_min=("usage", "min"), usage_max=("usage", "max"),
                 gated_fraction=("gated_fraction", "mean"), quality=("quality", "mean"),
                 cost_pct_dense=("cost_pct_dense", "mean"), seeds=("seed", "nunique")))


def _setting(row) -> str:
    """The model a row evaluates, as the figure names it: its variant and training recipe (rows without a
    ``recipe`` column are ``matched``)."""
    recipe = getattr(row, "recipe", None)
    recipe = "matched" if recipe is None or pd.isna(recipe) or recipe == "" else str(recipe)
    variant = getattr(row, "variant", None)
    variant = "" if variant is None or pd.isna(variant) else str(variant)
    return f"cct {variant} [recipe={recipe}]".replace("  ", " ")


def _unit_order(units) -> list[str]:
    rank = {"kv": 0, "att": 1, "xkv": 2, "xatt": 3}
    return sorted(units, key=lambda u: (rank.get(u, 4), u))


def _budget_key(label: str) -> tuple[float, ...]:
    """Budget labels: ``0.5`` (one budget) or ``e0.5-d0.2`` (encoder, decoder); largest first."""
    return tuple(-float(part) for part in re.findall(r"[\d.]+", label))


def _panel(ax, part: pd.DataFrame, layers: list[str], units: list[str], budget: str, setting: str | None):
    """One heatmap: the share of tokens that ran each (layer, unit) at one budget of one setting."""
    grid = part.pivot(index="layer", columns="unit", values="usage").reindex(index=layers, columns=units)
    spread = (part.assign(half=(part["usage_max"] - part["usage_min"]) / 2)
              .pivot(index="layer", columns="unit", values="half").reindex(index=layers, columns=units))
    image = ax.imshow(grid.to_numpy(), vmin=0, vmax=1, cmap="viridis", aspect="auto")
    for (i, j), value in pd.DataFrame(grid.to_numpy()).stack().dropna().items():
        half = spread.to_numpy()[i, j]
        ax.text(j, i, f"{value:.2f}" + (f"\n±{half:.2f}" if half == half and half > 0 else ""), ha="center",
                va="center", fontsize=6, color="white" if value < 0.6 else "black")
    ax.set_xticks(range(len(units)), units, fontsize=8)
    ax.set_yticks(range(len(layers)), layers if setting is not None else [""] * len(layers), fontsize=8)
    first = part.iloc[0]
    ran = "" if pd.isna(first["gated_fraction"]) else f": gated units ran {first['gated_fraction']:.2f}"
    metric = "top-1" if first["metric"] == "top1" else first["metric"]
    seeds = int(part["seeds"].max())
    head = f"{setting}, {seeds} seed{'s' if seeds > 1 else ''}\n" if setting is not None else ""
    ax.set_title(f"{head}budget {budget}{ran}\n{first['cost_pct_dense']:.0f}% of dense MACs, {metric} "
                 f"{first['quality']:.3g}", fontsize=8, loc="left" if setting is not None else "center")
    return image


def draw(rows: pd.DataFrame, results_dir: Path, reports_dir: Path, stem: str) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = table(rows, results_dir)
    if data.empty:
        return []
    task = rows["task"].iloc[0]
    settings = sorted(data["setting"].unique())
    budgets = {setting: sorted(data.loc[data["setting"] == setting, "budget"].unique(), key=_budget_key)
               for setting in settings}
    columns = max(len(b) for b in budgets.values())
    units = _unit_order(data["unit"].unique())
    layers = list(data.sort_values("order")["layer"].drop_duplicates())
    height = (4.0 if len(layers) <= 6 else 0.45 * len(layers) + 1.6) + 0.4
    fig, axes = plt.subplots(len(settings), columns, figsize=(3.4 * columns + 1.2, height * len(settings)),
                             squeeze=False)
    image = None
    for row_axes, setting in zip(axes, settings):
        for i, ax in enumerate(row_axes):
            if i >= len(budgets[setting]):
                ax.set_visible(False)
                continue
            budget = budgets[setting][i]
            part = data[(data["setting"] == setting) & (data["budget"] == budget)]
            image = _panel(ax, part, layers, units, budget, setting if i == 0 else None)
    fig.colorbar(image, cax=fig.add_axes((0.89, 0.12, 0.012, 0.6)), label="share of tokens that ran the unit")
    cross = ", xkv/xatt = cross-attention K/V / sublayer" if "xatt" in units else ""
    fig.suptitle(f"CCT gate usage by layer and unit (kv = K/V projections, att = attention sublayer{cross}, "
                 f"ffn<i> = FFN slice i)\n{task}: {data['dataset'].iloc[0]}; one row per trained model (its "
                 "variant and recipe), its seeds pooled (±: half the range over seeds)", fontsize=9)
    top = 1 - 0.9 / (height * len(settings))
    fig.subplots_adjust(top=top, bottom=0.1 / len(settings), left=0.07, right=0.86, wspace=0.15,
                        hspace=0.55 if len(settings) > 1 else 0.2)
    reports_dir.mkdir(parents=True, exist_ok=True)
    path = reports_dir / f"{stem}_cct_gate_usage.png"
    save_figure(fig, path)
    plt.close(fig)
    csv = reports_dir / f"{stem}_cct_gate_usage.csv"
    results.atomic_write_frame(csv, data)
    return [path, csv]
