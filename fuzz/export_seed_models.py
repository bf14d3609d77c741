"""Writes the fuzzing seeds that come from the test models (tests/python/models.py): each exported to ONNX, with
its weights as initializers, in training mode where it has dropout or batch norm, at sizes small enough to
mutate quickly. Usage: export_seed_models.py FOLDER."""

import io
import pathlib
import sys
import warnings

import torch

sys.path[:0] = [str(pathlib.Path(__file__).parents[1] / d) for d in ("examples", "tests/python")]
from models import BERT, CNN, GPT, MLP, UNet  # noqa: E402


def export(model, args, path, training):
    f = io.BytesIO()
    mode = torch.onnx.TrainingMode.TRAINING if training else torch.onnx.TrainingMode.EVAL
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, args, f, dynamo=False, training=mode, do_constant_folding=False, opset_version=17)
    path.write_bytes(f.getvalue())


def main(folder):
    folder = pathlib.Path(folder)
    torch.manual_seed(0)
    idx = torch.randint(0, 17, (2, 8))
    cases = {
        "gpt": (GPT(vocab=17, dim=16, heads=2, layers=1, block=8, dropout=0.1), (idx,), True),
        "bert": (BERT(vocab=17, dim=16, heads=2, layers=1, block=8), (idx, torch.ones(2, 8)), False),
        "cnn": (CNN(classes=3), (torch.randn(2, 3, 8, 8),), True),
        "unet": (UNet(classes=2), (torch.randn(1, 3, 8, 8),), False),
        "mlp": (MLP((4, 8, 8, 3)), (torch.randn(2, 4),), False),
    }
    for name, (model, args, training) in cases.items():
        model.train(training)
        export(model, args, folder / f"exported-{name}.onnx", training)


if __name__ == "__main__":
    main(sys.argv[1])
