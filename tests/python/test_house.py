"""The house's rules, read from the sources: the public API includes nothing internal and the CLI's commands nothing
but it, the runtime and what sits above it reach kernels through the registry alone, no source file of src/ is
over 400 lines, one CMake library per part and no global instruction-set flag. (The build enforces the layering
itself: each part and the CLI see only the headers they may include; these checks say so where a reader looks.)"""

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
INCLUDE = re.compile(r'^#include "([^"]+)"', re.M)


def includes(path):
    return INCLUDE.findall(path.read_text())


def test_the_public_api_includes_only_itself():
    for header in (ROOT / "include/onnxtrain").glob("*.h"):
        assert all(i.startswith("onnxtrain/") for i in includes(header)), header.name


def test_the_cli_commands_compile_against_the_public_api_alone():
    for source in list((ROOT / "tools").glob("*.cpp")) + list((ROOT / "tools").glob("*.h")):
        internal = [i for i in includes(source) if not i.startswith(("onnxtrain/", "tools/"))]
        assert not internal, f"{source.name} includes {internal}"


def test_nothing_above_the_kernels_includes_a_devices_kernels():
    for part in ("autodiff", "passes", "memory", "runtime", "python"):
        for source in (ROOT / "src" / part).iterdir():
            assert not [i for i in includes(source) if i.startswith("kernels/cpu/") or i.startswith("kernels/cuda/")], \
                f"{part}/{source.name}"


def test_no_source_file_of_src_is_over_400_lines():
    long = {str(p.relative_to(ROOT)): n for p in (ROOT / "src").rglob("*") if p.suffix in (".cpp", ".h", ".cu", ".cuh")
            for n in [len(p.read_text().splitlines())] if n > 400}
    assert not long


def test_one_library_per_part_and_no_global_instruction_set_flag():
    cmake = (ROOT / "CMakeLists.txt").read_text()
    parts = re.search(r"set\(ONNXTRAIN_PARTS ([^)]*)\)", cmake).group(1).split()
    assert len(parts) >= 6 and "add_library(onnxtrain_${part} OBJECT ${own})" in cmake
    global_flags = " ".join(re.findall(r"add_compile_options\(([^)]*)\)", cmake))
    assert "-mavx" not in global_flags and "-march" not in global_flags
