"""Build and install the phasescope package: `pip install --no-build-isolation ./python` (offline is fine).

The extension phasescope._core is built by the project's CMake (target phasescope_python) against the
torch of the interpreter that runs this script, in ../build unless PHASESCOPE_BUILD_DIR says otherwise,
then copied into the package. Needs what scripts/setup.sh installs (libtorch-dev, pybind11-dev, ...).
"""
import glob
import os
import shutil
import subprocess
import sys

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


class BuildWithCMake(build_py):
    def run(self):
        build = os.environ.get("PHASESCOPE_BUILD_DIR", os.path.join(ROOT, "build"))
        subprocess.check_call(["cmake", "-S", ROOT, "-B", build, "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release",
                               f"-DPHASESCOPE_PYTHON={sys.executable}"])
        subprocess.check_call(["cmake", "--build", build, "--target", "phasescope_python"])
        super().run()
        target = os.path.join(self.build_lib, "phasescope")
        os.makedirs(target, exist_ok=True)
        for so in glob.glob(os.path.join(HERE, "phasescope", "_core*.so")):
            shutil.copy(so, target)


setup(packages=["phasescope"], cmdclass={"build_py": BuildWithCMake})
