"""The memory timeline of a training step: bytes over the execution order, stacked by category (parameters,
gradients, stash, recompute, transient), the forward/backward boundary marked, the predicted peak drawn."""

import json
import os

CATEGORIES = ("stash", "recompute", "transient", "gradient")


def save(timeline_json, path):
    """Writes `path` (.png, drawn with matplotlib) and the same path with .json; returns the parsed timeline."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = json.loads(timeline_json)
    base = os.path.splitext(path)[0]
    tmp = base + ".json.tmp"
    with open(tmp, "w") as f:
        json.dump(t, f)
    os.replace(tmp, base + ".json")
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
    ax.set_title("onnxtrain memory timeline of one training step")
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    tmp = base + ".png.tmp"
    fig.savefig(tmp, format="png", dpi=100)
    plt.close(fig)
    os.replace(tmp, path)
    return t
