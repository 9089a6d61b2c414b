"""Builds kolo's native parts with CMake for pip (see pyproject.toml).

The extension kolo._C and the kolorun launcher are built by the project's
own CMake in a temporary directory (Release, no tests, no LibTorch: the
extension never links it) and copied into the package: kolo/_C*.so and
kolo/bin/kolorun, which the `kolorun` console script runs."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build = Path(self.build_temp).resolve() / "cmake"
        build.mkdir(parents=True, exist_ok=True)
        gen = ["-G", "Ninja"] if shutil.which("ninja") else []
        try:  # PyPI's pybind11 under build isolation; else CMake finds Debian's pybind11-dev
            import pybind11
            gen.append(f"-Dpybind11_DIR={pybind11.get_cmake_dir()}")
        except ImportError:
            pass
        subprocess.run(["cmake", "-S", str(ROOT), "-B", str(build), *gen,
                        "-DCMAKE_BUILD_TYPE=Release", "-DCMAKE_CXX_FLAGS_RELEASE=-O2 -DNDEBUG",
                        "-DKOLO_BUILD_TESTS=OFF",
                        "-DKOLO_WITH_TORCH=OFF", f"-DPython3_EXECUTABLE={sys.executable}"],
                       check=True)
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", str(min(os.cpu_count() or 1, 4)))
        subprocess.run(["cmake", "--build", str(build), "--parallel", jobs, "--target",
                        "kolo_python", "kolorun"], check=True)
        so = next((build / "python" / "kolo").glob("_C*.so"))
        target = Path(self.get_ext_fullpath(ext.name))
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(so, target)
        bindir = target.parent / "bin"
        bindir.mkdir(exist_ok=True)
        shutil.copy2(build / "tools" / "kolorun" / "kolorun", bindir / "kolorun")


# build-pip/, not build/: scripts/build.sh's CMake tree lives in build/. The
# egg-info goes there too, not into python/ beside the sources; setuptools
# refuses an egg_base that does not exist, as in a fresh clone.
(ROOT / "build-pip").mkdir(exist_ok=True)
setup(ext_modules=[Extension("kolo._C", sources=[])], cmdclass={"build_ext": CMakeBuild},
      options={"build": {"build_base": "build-pip"}, "egg_info": {"egg_base": "build-pip"}})
