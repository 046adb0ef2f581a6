"""The scale picture: how each service path's cost grows with the fleet, drawn from bench/scale.json (the
figures bench/README.md tabulates) into bench/scale.png.

    pip install matplotlib   # the `bench` extra
    python bench/scale_plot.py

Each path is one panel with the fleet's nodes on a log axis; measured points are solid, the points
worked out from a measured per-unit cost (marked "estimated" in the JSON) are hollow."""

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no screen
import matplotlib.pyplot as plt  # noqa: E402

HERE = Path(__file__).resolve().parent


def main() -> None:
    paths = json.loads((HERE / "scale.json").read_text())["paths"]
    figure, axes = plt.subplots(1, len(paths), figsize=(4.2 * len(paths), 3.6), constrained_layout=True)
    for ax, path in zip(axes, paths, strict=True):
        for series in path["series"]:
            measured = [p for p in series["points"] if not p.get("estimated")]
            estimated = [p for p in series["points"] if p.get("estimated")]
            line = ax.plot(
                [p["nodes"] for p in measured], [p["value"] for p in measured], "o-", label=series["name"]
            )
            if estimated:
                colour = line[0].get_color()
                last = measured[-1:] + estimated
                ax.plot([p["nodes"] for p in last], [p["value"] for p in last], "--", color=colour)
                ax.plot(
                    [p["nodes"] for p in estimated],
                    [p["value"] for p in estimated],
                    "o",
                    mfc="none",
                    color=colour,
                )
        if "limit" in path:
            ax.axhline(path["limit"], color="grey", linewidth=0.8, linestyle=":")
        ax.set_xscale("log")
        ax.set_xlabel("nodes (8 GPUs each)")
        ax.set_ylabel(path["unit"])
        ax.set_title(path["title"], fontsize=10)
        ax.legend(fontsize=7)
    figure.savefig(HERE / "scale.png", dpi=110)


if __name__ == "__main__":
    main()
