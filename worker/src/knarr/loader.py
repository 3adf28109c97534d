"""Finding the user's handler class from ``module.path:Class`` or ``path/to/file.py:Class``.

Whatever goes wrong — a syntax error, an exception while the module runs, a missing class,
a class that is no valid handler — becomes one :class:`HandlerError` that names the file and
line, so ``knarr run`` and ``knarr check`` exit 2 with a message instead of a traceback.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import traceback
from pathlib import Path
from types import ModuleType

from knarr.api.contract import handler_problems
from knarr.api.handler import BaseHandler
from knarr.config.paths import is_file_handler
from knarr.errors import HandlerError

# The name callers know; the class lives in the error tree.
HandlerLoadError = HandlerError


def load_handler_class(spec: str) -> type[BaseHandler]:
    """Import the class ``spec`` names and check it against the hook contract."""
    if ":" not in spec:
        raise HandlerError(f"handler {spec!r} must look like 'package.module:ClassName' or 'path/to/file.py:ClassName'")
    target, _, class_name = spec.rpartition(":")
    if not class_name.isidentifier():
        raise HandlerError(f"handler {spec!r}: {class_name!r} is not a class name")
    module = _import_file(spec, Path(target)) if is_file_handler(spec) else _import_module(spec, target)
    cls = getattr(module, class_name, None)
    if cls is None:
        found = sorted(n for n, v in vars(module).items() if isinstance(v, type) and issubclass(v, BaseHandler) and v is not BaseHandler)
        hint = f"; it defines {', '.join(found)}" if found else "; it defines no knarr.BaseHandler subclass"
        raise HandlerError(f"handler {spec!r}: {target!r} has no class {class_name!r}{hint}")
    if not (isinstance(cls, type) and issubclass(cls, BaseHandler)):
        raise HandlerError(f"handler {spec!r}: {class_name} is not a subclass of knarr.BaseHandler")
    problems = handler_problems(cls)
    if problems:
        raise HandlerError(f"handler {spec!r} is not usable:\n" + "\n".join(f"  {p}" for p in problems))
    return cls


def _import_file(spec: str, path: Path) -> ModuleType:
    if not path.is_file():
        raise HandlerError(f"handler {spec!r}: file {str(path)!r} does not exist")
    module_name = f"knarr_user_{path.stem}"
    module_spec = importlib.util.spec_from_file_location(module_name, path)
    assert module_spec is not None and module_spec.loader is not None
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[module_name] = module
    folder = str(path.parent.resolve())
    if folder not in sys.path:
        sys.path.insert(0, folder)  # its sibling modules import as they would with `python file.py`
    try:
        module_spec.loader.exec_module(module)
    except (Exception, SystemExit) as exc:  # SystemExit at import time is a handler bug too
        del sys.modules[module_name]
        raise HandlerError(_import_failure(spec, exc)) from None
    return module


def _import_module(spec: str, target: str) -> ModuleType:
    if "" not in sys.path:
        sys.path.insert(0, "")  # like `python -m`: modules in the working directory resolve
    try:
        return importlib.import_module(target)
    except ModuleNotFoundError as exc:
        if exc.name and (target == exc.name or target.startswith(exc.name + ".")):
            raise HandlerError(f"handler {spec!r}: cannot import module {target!r} ({exc}); is it on PYTHONPATH?") from None
        raise HandlerError(_import_failure(spec, exc)) from None
    except (Exception, SystemExit) as exc:
        raise HandlerError(_import_failure(spec, exc)) from None


def _import_failure(spec: str, exc: BaseException) -> str:
    """``file:line: what`` for an error raised while the handler's module was imported."""
    if isinstance(exc, SyntaxError) and exc.filename:
        pointer = ""
        if exc.text:
            caret = " " * max(0, (exc.offset or 1) - 1) + "^"
            pointer = f"\n    {exc.text.rstrip()}\n    {caret}"
        return f"{exc.filename}:{exc.lineno}: {type(exc).__name__}: {exc.msg} (loading handler {spec!r}){pointer}"
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if "importlib" not in f.filename]
    where = f"{frames[-1].filename}:{frames[-1].lineno}: " if frames else ""
    line = f"\n    {frames[-1].line}" if frames and frames[-1].line else ""
    return f"{where}{type(exc).__name__}: {exc} (loading handler {spec!r}){line}"
