"""Builds knarr's native task runner (native/runner.c) into the wheel as ``_knarr_runner.so``.

A plain shared library (no Python API, loaded through ctypes by knarr/engine/native.py), built
with the C compiler found as ``$CC``, ``cc`` or ``gcc``. Without one, the wheel is built
without it and the worker starts tasks through its spawner thread instead, saying so at start
(executor.spawner: auto); KNARR_NATIVE_RUNNER=required makes a missing compiler fail the build.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

LIBRARY = "_knarr_runner.so"


class NativeRunnerHook(BuildHookInterface):
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict) -> None:
        source = Path(self.root) / "native" / "runner.c"
        compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
        required = os.environ.get("KNARR_NATIVE_RUNNER") == "required"
        if not sys.platform.startswith("linux") or compiler is None:
            why = "not Linux" if not sys.platform.startswith("linux") else "no C compiler (cc, gcc or $CC)"
            if required:
                raise RuntimeError(f"cannot build knarr's native task runner: {why}")
            self.app.display_warning(f"knarr: native task runner not built ({why}); tasks will start through "
                                     "the spawner thread")
            return
        self._workdir = tempfile.mkdtemp(prefix="knarr-native-")
        library = os.path.join(self._workdir, LIBRARY)
        command = [compiler, "-O2", "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC", "-pthread",
                   "-o", library, str(source)]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"cannot build knarr's native task runner: {' '.join(command)} failed:\n"
                               f"{done.stdout}{done.stderr}")
        if version == "editable":
            build_data["force_include_editable"][library] = LIBRARY
        else:
            build_data["force_include"][library] = LIBRARY
            build_data["pure_python"] = False
            # The library uses no Python ABI: one wheel serves every Python 3 on this platform.
            build_data["tag"] = "py3-none-" + sysconfig.get_platform().replace("-", "_").replace(".", "_")

    def finalize(self, version: str, build_data: dict, artifact_path: str) -> None:
        workdir = getattr(self, "_workdir", None)
        if workdir:
            shutil.rmtree(workdir, ignore_errors=True)
