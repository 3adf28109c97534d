"""Finding the user's handler class from ``module.path:Class`` or ``path/to/file.py:Class``."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path

from knarr.api.handler import BaseHandler


class HandlerLoadError(ValueError):
    pass


def load_handler_class(spec: str) -> type[BaseHandler]:
    if ":" not in spec:
        raise HandlerLoadError(f"--handler {spec!r} must look like 'package.module:ClassName' or 'path/to/file.py:ClassName'")
    target, _, class_name = spec.rpartition(":")
    if not class_name.isidentifier():
        raise HandlerLoadError(f"--handler {spec!r}: {class_name!r} is not a class name")
    if target.endswith(".py") or "/" in target:
        path = Path(target)
        if not path.is_file():
            raise HandlerLoadError(f"--handler {spec!r}: file {target!r} does not exist")
        module_name = f"knarr_user_{path.stem}"
        module_spec = importlib.util.spec_from_file_location(module_name, path)
        assert module_spec is not None and module_spec.loader is not None
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[module_name] = module
        sys.path.insert(0, str(path.parent.resolve()))
        module_spec.loader.exec_module(module)
    else:
        if "" not in sys.path:
            sys.path.insert(0, "")  # like `python -m`: modules in the working directory resolve
        try:
            module = importlib.import_module(target)
        except ModuleNotFoundError as exc:
            raise HandlerLoadError(f"--handler {spec!r}: cannot import module {target!r} ({exc}); is it on PYTHONPATH?") from None
    cls = getattr(module, class_name, None)
    if cls is None:
        raise HandlerLoadError(f"--handler {spec!r}: module {target!r} has no attribute {class_name!r}")
    if not (isinstance(cls, type) and issubclass(cls, BaseHandler)):
        raise HandlerLoadError(f"--handler {spec!r}: {class_name} is not a subclass of knarr.BaseHandler")
    return cls
