"""The memory timeline of a training step: bytes over the execution order, stacked by category (parameters,
gradients, stash, recompute, transient, kernel scratch), the forward/backward boundary marked, the predicted peak
drawn."""

import json
import os

CATEGORIES = ("stash", "recompute", "transient", "scratch", "gradient")


def save(timeline_json, path):
    """Writes `path` (.png, drawn with matplotlib) and the same path with .json; returns the parsed timeline."""
    t = json.loads(timeline_json)
    base = os.path.splitext(path)[0]
    tmp = base + ".json.tmp"
    with open(tmp, "w") as f:
        json.dump(t, f)
    os.replace(tmp, base + ".json")
    draw(t, path)
    return t


def draw(t, path):
    """Draws a parsed timeline into the PNG `path` (written atomically)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    base = os.path.splitext(path)[0]
    mib = 2**20
    steps = [s["step"] for s in t["steps"]]
    params = [t["parameters"] / mib] * len(steps)
    layers = [params] + [[s["live"].get(c, 0) / mib for s in t["steps"]] for c in CATEGORIES]
    fig, ax = plt.subplots(figsize=(10, 4.5))
    ax.stackplot(steps, *layers, labels=("parameters",) + CATEGORIES, step="post", alpha=0.85)
    ax.axvline(t["boundary"] - 0.5, color="black", linestyle="--", linewidth=1, label="forward | backward")
    if t["predicted_peak"] >= 0:
        ax.axhline((t["parameters"] + t["predicted_peak"]) / mib, color="red", linewidth=1, label="predicted peak")
    ax.set_xlabel("step of the execution order")
    ax.set_ylabel("MiB")
    source = t.get("source", "predicted")
    if "measured_peak" in t:
        ax.axhline((t["parameters"] + t["measured_peak"]) / mib, color="black", linewidth=1, linestyle=":",
                   label="measured peak")
    totals = [sum(s["live"].values()) for s in t["steps"]]
    top = max(range(len(totals)), key=totals.__getitem__) if totals else None
    if top is not None:  # where the peak is, and what it is made of
        at = t["steps"][top]
        parts = ", ".join(f"{c} {at['live'].get(c, 0) / mib:.1f}" for c in CATEGORIES if at["live"].get(c, 0))
        ax.annotate(f"peak {(t['parameters'] + totals[top]) / mib:.1f} MiB at {at['node']} ({at['op']})\n{parts}",
                    xy=(steps[top], (t["parameters"] + totals[top]) / mib), xytext=(0.62, 0.93),
                    textcoords="axes fraction", fontsize=8, va="top", arrowprops={"arrowstyle": "->", "lw": 0.8})
    ax.set_title(f"onnxtrain memory timeline of one training step ({source})")
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    tmp = base + ".png.tmp"
    fig.savefig(tmp, format="png", dpi=100)
    plt.close(fig)
    os.replace(tmp, path)


if __name__ == "__main__":  # python -m onnxtrain.timeline TIMELINE.json OUT.png (used by `onnxtrain plan --plot`)
    import sys

    if len(sys.argv) != 3:
        sys.exit("usage: python -m onnxtrain.timeline TIMELINE.json OUT.png")
    with open(sys.argv[1]) as f:
        draw(json.load(f), sys.argv[2])
