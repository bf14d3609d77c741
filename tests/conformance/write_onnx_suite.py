"""Writes the ONNX backend node-test suite of the installed `onnx` package to a folder.

Each test becomes `<out>/<name>/model.onnx` with `test_data_set_<i>/{input,output}_<j>.pb`, the layout
`onnxtrain conformance` reads (the same as Debian's libonnx-testdata). Tests whose inputs or outputs are
not plain tensors (sequences, maps, optionals) are written too; the runner reports them as skips.
"""

import argparse
import os
import shutil
import warnings

import numpy as np
import onnx
from onnx import numpy_helper
import onnx.backend.test.case.node as node_cases


def write_value(path, value, type_proto, name):
    if type_proto.HasField("sequence_type"):
        proto = numpy_helper.from_list(value, name)
    elif type_proto.HasField("optional_type"):
        proto = numpy_helper.from_optional(value, name)
    elif type_proto.HasField("map_type"):
        proto = numpy_helper.from_dict(value, name)
    elif isinstance(value, onnx.TensorProto):
        proto = value
    else:
        proto = numpy_helper.from_array(np.asarray(value), name)
    with open(path, "wb") as f:
        f.write(proto.SerializeToString())


def write_case(case, out_dir):
    case_dir = os.path.join(out_dir, case.name)
    os.makedirs(case_dir)
    with open(os.path.join(case_dir, "model.onnx"), "wb") as f:
        f.write(case.model.SerializeToString())
    if (case.rtol, case.atol) != (1e-3, 1e-7):
        with open(os.path.join(case_dir, "tolerance.txt"), "w") as f:
            f.write(f"{case.rtol} {case.atol}\n")
    graph = case.model.graph
    for i, (inputs, outputs) in enumerate(case.data_sets):
        set_dir = os.path.join(case_dir, f"test_data_set_{i}")
        os.makedirs(set_dir)
        for j, value in enumerate(inputs):
            write_value(os.path.join(set_dir, f"input_{j}.pb"), value, graph.input[j].type, graph.input[j].name)
        for j, value in enumerate(outputs):
            write_value(os.path.join(set_dir, f"output_{j}.pb"), value, graph.output[j].type, graph.output[j].name)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out", help="folder to (re)create")
    args = parser.parse_args()
    stamp = os.path.join(args.out, "onnx_version.txt")
    if os.path.exists(stamp) and open(stamp).read().strip() == onnx.__version__:
        return  # already written by this onnx version
    shutil.rmtree(args.out, ignore_errors=True)
    os.makedirs(args.out)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = node_cases.collect_testcases(None)
    for case in cases:
        write_case(case, args.out)
    with open(stamp, "w") as f:
        f.write(onnx.__version__ + "\n")
    print(f"wrote {len(cases)} node tests of onnx {onnx.__version__} to {args.out}")


if __name__ == "__main__":
    main()
