"""The report's figures (matplotlib, vector PDF), drawn from the ``points`` of the results.

Which figures a claim gets is declared with the keys its checks record (``core.results.PLOT_SERIES``):

    sigma2, eps, measured, derived,    measured ||J||_2 against sigma^2, both relative to eps and to the bound
    bound                              max|gamma|/sqrt(eps), with each example's derived value and the
                                       derived curve (gamma = 1) from proofs.oracles
    kappa, ratio                       error/bound ratio against the row's condition number (1 = the bound)
    p, d, measured, var, mean          dropout's variance bias E[Var(z)] - Var(x) (measured: E[Var(z)]; var,
                                       mean: of x), normalized by (v + mu^2), against p, with the formula
                                       p(d-1)/(d(1-p)) from proofs.oracles

Each figure has one panel per kernel column.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import matplotlib as mpl
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from core.results import SERIES, PlotSeries, series_of

Series = tuple[str, list[dict]]  # (kernel column label, its points)
PANELS_PER_ROW = 3
TINY_RATIO = 1e-6  # ratios of exactly 0 are drawn here on the log axis


@dataclass(frozen=True)
class Plot:
    """A figure kind: the declared series it draws (its claims and point keys), how it draws one panel, its caption."""

    series: PlotSeries
    draw: Callable[[Axes, list[dict], str], None]
    caption: str


def _literal(text: str) -> str:
    """``text`` shown as it is: a ``$`` in a kernel's name must not start matplotlib's math mode."""
    return text.replace("$", r"\$")


def _colors() -> list[str]:
    return mpl.rcParams["axes.prop_cycle"].by_key()["color"]


def _groups(points: list[dict], key: str) -> dict:
    groups: dict = {}
    for point in points:
        groups.setdefault(point[key], []).append(point)
    return dict(sorted(groups.items(), key=lambda item: _order(item[0])))


def _order(value: object) -> tuple:
    """Numbers first, by value (d = 8 before 16), then everything else by its text."""
    return (0, value, "") if isinstance(value, (int, float)) else (1, 0, str(value))


def _derived_spectral_curve(claim: str, ratios: np.ndarray) -> np.ndarray:
    """||J||_2 sqrt(eps) of the derivation (gamma = 1, d = 3) at sigma^2/eps = ``ratios``, from proofs.oracles.

    With eps = 1 the row (a, -a, 0) has sigma^2 = mean(x^2) = 2a^2/3 = ratio, and the bound 1/sqrt(eps) is 1.
    """
    from proofs import oracles

    spectral_norm = oracles.rmsnorm_spectral_norm if claim.startswith("rms.") else oracles.layernorm_spectral_norm
    rows = np.sqrt(1.5 * ratios)[:, None] * np.array([1.0, -1.0, 0.0])
    return np.asarray(spectral_norm(rows, 1.0), dtype=np.float64)


def _draw_spectral(ax: Axes, points: list[dict], claim: str) -> None:
    """Normalized so every eps and gamma shares one picture: x = sigma^2/eps, y = ||J||_2 / (max|gamma|/sqrt(eps))."""
    points = [p for p in points if p["bound"] > 0 and p["eps"] > 0]
    x = np.array([max(p["sigma2"] / p["eps"], TINY_RATIO) for p in points])
    bound = np.array([p["bound"] for p in points])
    grid = np.logspace(np.log10(x.min()) - 0.5, np.log10(x.max()) + 0.5, 200)
    ax.plot(grid, _derived_spectral_curve(claim, grid), "-", color="gray", lw=1, label="derived, gamma = 1, d >= 3")
    ax.plot(x, np.array([p["derived"] for p in points]) / bound, "x", ms=4, color="black",
            label="derived for the example")
    ax.plot(x, np.array([p["measured"] for p in points]) / bound, "o", ms=5, mfc="none", color="tab:red",
            label="measured")
    ax.axhline(1.0, color="black", lw=0.8, ls="--", label="bound max|gamma|/sqrt(eps)")
    ax.set(xscale="log", yscale="log", xlabel=r"$\sigma^2/\varepsilon$ (row variance over eps)",
           ylabel=r"$\Vert J \Vert_2 \,/\, (\max|\gamma|/\sqrt{\varepsilon})$")


def _draw_ratio(ax: Axes, points: list[dict], claim: str) -> None:
    """Checked examples only: an unchecked one (a value without a finite bound) has ratio 0 but is no evidence."""
    by_dtype = _groups([{**p, "dtype": p.get("dtype", "?")} for p in points if not p.get("unchecked")], "dtype")
    for marker, (dtype, group) in zip("os^vD<>", by_dtype.items(), strict=False):
        ax.plot([p["kappa"] for p in group], [max(p["ratio"], TINY_RATIO) for p in group], marker, ms=3,
                mfc="none", label=_literal(str(dtype).removeprefix("torch.")))
    ax.axhline(1.0, color="black", lw=0.8, ls="--", label="bound (ratio 1)")
    ax.set(xscale="log", yscale="log", xlabel=r"condition number $\kappa$ of the row", ylabel="error / bound")


def _draw_dropout(ax: Axes, points: list[dict], claim: str) -> None:
    """Bias = E[Var(z)] - Var(x) per unit of second moment v + mu^2 (rows with v + mu^2 > 0), against p."""
    from proofs.oracles import dropout_variance_bias

    def per_unit(p: float, d: int) -> float:
        """The formula with v + mu^2 = 1: the bias per unit of second moment."""
        return float(dropout_variance_bias(p, d, 1.0, 0.0))

    points = [p for p in points if p["var"] + p["mean"] ** 2 > 0]
    for color, (d, group) in zip(_colors(), _groups(points, "d").items(), strict=False):
        normalized = [(p["measured"] - p["var"]) / (p["var"] + p["mean"] ** 2) for p in group]
        ax.plot([p["p"] for p in group], normalized, "o", ms=3, mfc="none", color=color, label=f"measured, d={d}")
        grid = np.linspace(0.0, max(p["p"] for p in group), 60)
        ax.plot(grid, [per_unit(q, d) for q in grid], "-", lw=1, color=color, label=f"p(d-1)/(d(1-p)), d={d}")
    ax.set(xlabel="drop probability p", ylabel=r"bias / $(v+\mu^2)$")


PLOTS = (
    Plot(SERIES["spectral"], _draw_spectral,
         r"Measured spectral norm $\|J\|_2$ of the Jacobian (circles) against the row variance $\sigma^2$, "
         r"both relative to $\varepsilon$ and the bound $\max|\gamma|/\sqrt{\varepsilon}$ (dashed): the derived "
         r"value of each example (crosses) and the derived curve for $\gamma = 1$, $d \ge 3$ (gray)."),
    Plot(SERIES["ratio"], _draw_ratio,
         r"Error divided by the derived bound against the row's condition number $\kappa$; "
         r"a point above the dashed line at 1 is a violation; exact results (ratio 0) are drawn at "
         rf"$10^{{{round(np.log10(TINY_RATIO))}}}$; unchecked examples (no finite bound) are not drawn."),
    Plot(SERIES["dropout"], _draw_dropout,
         r"Dropout's measured variance bias per unit of second moment $v+\mu^2$ (circles) against $p$, "
         r"with the derived $p(d-1)/(d(1-p))$ (lines)."),
)


def figures(claim: str, series: Sequence[Series], out_dir: Path) -> list[tuple[Path, str]]:
    """Every figure the points of ``claim`` support, written as PDF into ``out_dir``: (path, caption) pairs."""
    made = []
    for plot in (plot for plot in PLOTS if plot.series in series_of(claim)):
        panels = [(label, plot.series.of(points)) for label, points in series]
        panels = [(label, points) for label, points in panels if points]
        if not panels:
            continue
        path = Path(out_dir) / f"{claim.replace('.', '-').replace('_', '-')}-{plot.series.name}.pdf"
        _draw_panels(panels, plot, claim, path)
        made.append((path, plot.caption))
    return made


def _draw_panels(panels: list[tuple[str, list[dict]]], plot: Plot, claim: str, path: Path) -> None:
    """One panel per kernel on shared axes (so kernels compare at a glance), one legend for all below them."""
    columns = min(len(panels), PANELS_PER_ROW)
    rows = -(-len(panels) // columns)
    with mpl.rc_context({"font.size": 8, "legend.fontsize": 7, "pdf.fonttype": 42}):
        fig = Figure(figsize=(6.4, 2.3 * rows + 0.5), layout="constrained")
        axes = fig.subplots(rows, columns, squeeze=False, sharex=True, sharey=True)
        legend: dict = {}
        for ax, (label, points) in zip(axes.flat, panels, strict=False):
            plot.draw(ax, points, claim)
            ax.set_title(_literal(label), fontsize=8)
            ax.grid(True, which="major", lw=0.3, alpha=0.5)
            ax.label_outer()
            legend.update(zip(*reversed(ax.get_legend_handles_labels()), strict=True))
        for ax in axes.flat[len(panels):]:
            ax.set_visible(False)
        fig.legend(legend.values(), legend.keys(), loc="outside lower center", ncols=min(len(legend), 3),
                   frameon=False)
        fig.savefig(path, format="pdf")
