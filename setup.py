"""The build step of `pip install .` and `pip wheel .` (pyproject.toml holds the package's
metadata): builds trainfit with CMake (optimized, no tests) and puts the binding
(_trainfit*.so) and the `trainfit` program into the package.

    python3 -m venv v && v/bin/pip install .
    v/bin/python -c "import trainfit; print(trainfit.estimate('resnet50', batch=64))"
    v/bin/trainfit estimate --model resnet50 --batch 64 --gpu rtx4090

The CMake build goes to build/pip, or to $TRAINFIT_CMAKE_BUILD (a build folder that is already
configured, such as build/release, is built as it is). The packages the build needs are
Debian's: scripts/deps.sh build installs them.
"""
import glob
import os
import re
import shutil
import subprocess
import sys

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

ROOT = os.path.dirname(os.path.abspath(__file__))


def version():
    """The project version CMakeLists.txt declares."""
    with open(os.path.join(ROOT, "CMakeLists.txt"), encoding="utf-8") as f:
        found = re.search(r"project\(trainfit VERSION ([0-9.]+)", f.read())
    if found is None:
        sys.exit("setup.py: CMakeLists.txt names no project version")
    return found.group(1)


class BuildWithCMake(build_py):
    """Copies the Python sources, then builds the binding and the command with CMake and puts
    them in the package: trainfit/_trainfit*.so and trainfit/bin/trainfit."""

    def run(self):
        """Copies the sources, builds with CMake, and adds the binding and the program."""
        super().run()
        # The compilers run without a preloaded sanitizer runtime (one that a sanitized
        # binding's test sets for Python would load into them too).
        env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
        build = os.path.abspath(os.environ.get("TRAINFIT_CMAKE_BUILD")
                                or os.path.join(ROOT, "build", "pip"))
        if not os.path.exists(os.path.join(build, "CMakeCache.txt")):
            subprocess.check_call(["cmake", "-S", ROOT, "-B", build, "-DCMAKE_BUILD_TYPE=Release",
                                   "-DTRAINFIT_BUILD_TESTS=OFF", "-DTRAINFIT_BUILD_BENCH=OFF",
                                   f"-DTRAINFIT_PYTHON={sys.executable}"], env=env)
        subprocess.check_call(["cmake", "--build", build, "-j", str(os.cpu_count() or 1),
                               "--target", "trainfit", "trainfit_python"], env=env)
        package = os.path.join(self.build_lib, "trainfit")
        bindings = glob.glob(os.path.join(build, "python", "trainfit", "_trainfit*.so"))
        if not bindings:
            sys.exit(f"setup.py: the CMake build in {build} made no python/trainfit/_trainfit*.so")
        for path in bindings:
            shutil.copy2(path, package)
        os.makedirs(os.path.join(package, "bin"), exist_ok=True)
        shutil.copy2(os.path.join(build, "trainfit"), os.path.join(package, "bin", "trainfit"))


class BinaryDistribution(Distribution):
    """The wheel holds a compiled module and program: tagged for this platform, not pure."""

    def has_ext_modules(self):
        """Yes: the package holds a compiled module."""
        return True


setup(version=version(), cmdclass={"build_py": BuildWithCMake}, distclass=BinaryDistribution)
