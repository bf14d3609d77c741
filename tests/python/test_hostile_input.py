"""Hostile models get typed errors naming what is wrong, never a crash or a read outside the model's folder: sizes
whose bytes overflow, and external data that points out of the folder (relative, absolute, through a symbolic
link), past its file's end, or with malformed offsets; external data inside the folder still loads."""

import os
import subprocess

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxtrain

CLI = os.path.join(os.path.dirname(__file__), "..", "..", "build", "onnxtrain")
OPSETS = [helper.make_opsetid("", 18)]


def identity_of(tensor):
    node = helper.make_node("Identity", [tensor.name], ["y"])
    graph = helper.make_graph([node], "g", [], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              initializer=[tensor])
    return helper.make_model(graph, opset_imports=OPSETS)


def test_constant_of_shape_whose_bytes_overflow_is_a_shape_error_naming_the_node():
    shape = numpy_helper.from_array(np.array([2**31, 2**31], np.int64), "shape")
    graph = helper.make_graph([helper.make_node("ConstantOfShape", ["shape"], ["y"], name="huge")], "g", [],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializer=[shape])
    with pytest.raises(onnxtrain.ShapeError, match=r"node 'huge'.*\[2147483648, 2147483648\].*2\^63 bytes"):
        # (constant folding runs it when the session is made)
        onnxtrain.Session.from_bytes(helper.make_model(graph, opset_imports=OPSETS).SerializeToString()).run({})


def test_an_initializer_whose_bytes_overflow_is_an_error_naming_it():
    t = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[2**31, 2**31, 4], raw_data=b"")
    with pytest.raises(onnxtrain.ShapeError, match="tensor 'w'.*2\\^63 bytes"):
        onnxtrain.Session.from_bytes(identity_of(t).SerializeToString())


def external(location, offset=None, length=None):
    t = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[4], data_location=TensorProto.EXTERNAL)
    for key, value in [("location", location), ("offset", offset), ("length", length)]:
        if value is not None:
            entry = t.external_data.add()
            entry.key, entry.value = key, str(value)
    return t


def run_model_file(folder, tensor):
    path = folder / "model.onnx"
    path.write_bytes(identity_of(tensor).SerializeToString())
    return subprocess.run([CLI, "run", str(path)], capture_output=True, text=True)


@pytest.fixture
def folders(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (tmp_path / "secret.bin").write_bytes(np.arange(4, dtype=np.float32).tobytes())
    (model / "weights.bin").write_bytes(np.array([7, 8, 9, 10, 11, 12], dtype=np.float32).tobytes())
    os.symlink(tmp_path / "secret.bin", model / "link.bin")
    return tmp_path, model


@pytest.mark.parametrize("location,message", [
    ("../secret.bin", "leaves the model's folder"),
    ("sub/../../secret.bin", "leaves the model's folder"),
    ("ABSOLUTE", "is absolute"),
    ("link.bin", "outside the model's folder"),
])
def test_external_data_outside_the_models_folder_is_refused(folders, location, message):
    root, model = folders
    location = str(root / "secret.bin") if location == "ABSOLUTE" else location
    r = run_model_file(model, external(location))
    assert r.returncode == 1 and message in r.stderr and "tensor 'w'" in r.stderr, r.stderr


@pytest.mark.parametrize("offset,length,message", [
    (12, None, "too few for 16 at offset 12"),
    (2**62, None, "too few"),
    (2**64, None, "not a non-negative 64-bit integer"),
    ("-4", None, "not a non-negative 64-bit integer"),
    ("1e3", None, "not a non-negative 64-bit integer"),
    (0, 20, "length 20 != 16 bytes"),
])
def test_external_data_past_its_file_or_malformed_is_a_model_error(folders, offset, length, message):
    _, model = folders
    r = run_model_file(model, external("weights.bin", offset, length))
    assert r.returncode == 1 and message in r.stderr, r.stderr


def test_external_data_inside_the_folder_loads(folders):
    _, model = folders
    r = run_model_file(model, external("weights.bin", offset=8, length=16))
    assert r.returncode == 0 and "9" in r.stdout and "12" in r.stdout, r.stdout + r.stderr


def test_external_data_of_a_model_given_as_bytes_is_refused():
    with pytest.raises(onnxtrain.ModelError, match="beside a model loaded from a file"):
        onnxtrain.Session.from_bytes(identity_of(external("weights.bin")).SerializeToString())
