"""`python3 -m pip install .` (in a virtual environment; see README "Python"): builds the extension
module sinkscope._sinkscope with CMake, from the same project as the command line, and installs the
sinkscope package (python/sinkscope). Works offline with Debian's packages: there is no
pyproject.toml, so pip builds with the setuptools and wheel already installed instead of fetching
them into an isolated environment.

SINKSCOPE_BUILD_DIR=DIR reuses a configured build tree (scripts/test.sh points it at build/);
otherwise the build goes to build-python/ (libraries and the module only).
"""
import os
import pathlib
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = pathlib.Path(__file__).parent.resolve()


class CMakeExtension(Extension):
    def __init__(self, name):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        reuse = os.environ.get("SINKSCOPE_BUILD_DIR")
        build = pathlib.Path(reuse).resolve() if reuse else ROOT / "build-python"
        if not (build / "CMakeCache.txt").exists():
            configure = ["cmake", "-S", str(ROOT), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release",
                         f"-DPython_EXECUTABLE={sys.executable}", "-DSINKSCOPE_TESTS=OFF",
                         "-DSINKSCOPE_BENCH=OFF", "-DSINKSCOPE_PYTHON=ON"]
            if shutil.which("ninja"):
                configure += ["-G", "Ninja"]
            subprocess.check_call(configure)
        subprocess.check_call(["cmake", "--build", str(build), "--target", "_sinkscope", "--parallel",
                               str(os.cpu_count() or 1)])
        name = pathlib.Path(self.get_ext_filename(ext.name)).name
        built = build / "python" / "sinkscope" / name
        if not built.exists():
            raise RuntimeError(f"{built} was not built: is pybind11-dev installed? (scripts/setup.sh)")
        target = pathlib.Path(self.get_ext_fullpath(ext.name))
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(built, target)


setup(
    name="sinkscope",
    version="0.1.0",
    description="Attention sinks in transformer language models: analyze, explain, trace, stream",
    package_dir={"": "python"},
    packages=["sinkscope"],
    package_data={"sinkscope": ["*.pyi", "py.typed"]},
    ext_modules=[CMakeExtension("sinkscope._sinkscope")],
    cmdclass={"build_ext": CMakeBuild},
    python_requires=">=3.9",
    zip_safe=False,
)
