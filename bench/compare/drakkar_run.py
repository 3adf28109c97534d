"""Run a Drakkar worker: ``python drakkar_run.py CONFIG.yaml HANDLER_FILE.py:Class``.

Drakkar has no command line of its own (a worker is a program that builds ``DrakkarApp``);
this is that program, for the handlers here. Runs in the Drakkar venv (Python 3.13).
"""

import importlib.util
import sys
from pathlib import Path

import drakkar as dk


def load_handler(spec: str):
    path, _, name = spec.rpartition(":")
    module_spec = importlib.util.spec_from_file_location(Path(path).stem, path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return getattr(module, name)()


if __name__ == "__main__":
    config_path, handler_spec = sys.argv[1:3]
    dk.DrakkarApp(handler=load_handler(handler_spec), config_path=config_path).run()
