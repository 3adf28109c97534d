"""A handler that cannot work is refused before anything runs, naming the file, line and hook."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from knarr.errors import ExitCode, HandlerError
from knarr.loader import load_handler_class

GOOD = '''
import knarr

class Handler(knarr.BaseHandler):
    async def arrange(self, messages, pending):
        return []
'''


def handler_file(tmp_path: Path, body: str, name: str = "handler.py") -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return f"{path}:Handler"


def problem(tmp_path: Path, body: str) -> str:
    with pytest.raises(HandlerError) as err:
        load_handler_class(handler_file(tmp_path, body))
    return str(err.value)


def test_a_valid_handler_file_loads(tmp_path):
    assert load_handler_class(handler_file(tmp_path, GOOD)).__name__ == "Handler"


def test_a_syntax_error_names_the_file_and_line(tmp_path):
    message = problem(tmp_path, "import knarr\n\nclass Handler(knarr.BaseHandler)\n    pass\n")
    assert f"{tmp_path / 'handler.py'}:3: SyntaxError" in message
    assert "class Handler(knarr.BaseHandler)" in message  # the offending line is shown


def test_an_exception_while_the_module_runs_names_the_file_and_line(tmp_path):
    message = problem(tmp_path, "import knarr\nLIMIT = int('ten')\n")
    assert f"{tmp_path / 'handler.py'}:2: ValueError: invalid literal" in message
    assert "LIMIT = int('ten')" in message


def test_a_missing_dependency_of_the_handler_is_named_as_such(tmp_path):
    message = problem(tmp_path, "import knarr\nimport no_such_library_here\n")
    assert f"{tmp_path / 'handler.py'}:2: ModuleNotFoundError: No module named 'no_such_library_here'" in message


def test_a_missing_class_lists_the_handlers_the_file_defines(tmp_path):
    with pytest.raises(HandlerError, match="has no class 'Handler'; it defines Other"):
        load_handler_class(handler_file(tmp_path, GOOD.replace("class Handler", "class Other")))


def test_a_handler_without_arrange_is_refused(tmp_path):
    message = problem(tmp_path, "import knarr\n\nclass Handler(knarr.BaseHandler):\n    pass\n")
    assert "Handler does not define arrange()" in message
    assert "async def arrange(self, messages, pending)" in message


def test_a_misspelled_hook_is_an_error_with_a_suggestion_and_its_line(tmp_path):
    message = problem(tmp_path, GOOD + "\n    async def on_task_complet(self, result):\n        return None\n")
    assert f"{tmp_path / 'handler.py'}:8: Handler.on_task_complet is not a handler hook" in message
    assert "did you mean 'on_task_complete'?" in message


def test_a_name_close_to_a_hook_without_the_on_prefix_is_caught_too(tmp_path):
    body = "import knarr\n\nclass Handler(knarr.BaseHandler):\n    async def arange(self, messages, pending):\n        return []\n"
    message = problem(tmp_path, body)
    assert "Handler.arange is not a handler hook" in message and "did you mean 'arrange'?" in message


def test_every_problem_is_listed_at_once(tmp_path):
    body = ("import knarr\n\nclass Handler(knarr.BaseHandler):\n"
            "    async def on_eror(self, task, error):\n        pass\n"
            "    async def on_windows_complete(self, results, messages):\n        pass\n")
    message = problem(tmp_path, body)
    assert "does not define arrange()" in message
    assert "did you mean 'on_error'?" in message and "did you mean 'on_window_complete'?" in message


def test_a_hook_that_is_not_async_is_refused_with_the_signature_to_write(tmp_path):
    message = problem(tmp_path, "import knarr\n\nclass Handler(knarr.BaseHandler):\n    def arrange(self, messages, pending):\n        return []\n")
    assert "Handler.arrange must be `async def`" in message
    assert "async def arrange(self, messages, pending)" in message


def test_a_synchronous_hook_written_async_is_refused(tmp_path):
    message = problem(tmp_path, GOOD + "\n    async def task_priority(self, task):\n        return 0\n")
    assert "Handler.task_priority must be a plain `def`, not async" in message


def test_a_hook_that_cannot_take_the_workers_arguments_is_refused(tmp_path):
    message = problem(tmp_path, GOOD + "\n    async def on_error(self, task):\n        return None\n")
    assert "Handler.on_error(self, task) cannot take what the worker passes" in message
    assert "write async def on_error(self, task, error)" in message


def test_extra_optional_parameters_and_star_args_are_fine(tmp_path):
    body = GOOD + ("\n    async def on_ready(self, config, pg_pool=None):\n        pass\n"
                   "\n    async def on_error(self, *args):\n        return None\n")
    assert load_handler_class(handler_file(tmp_path, body))


def test_helpers_and_periodic_methods_are_not_mistaken_for_hooks(tmp_path):
    body = GOOD + ('\n    def parse_line(self, line):\n        return line\n'
                   '\n    @knarr.periodic(seconds=60)\n    async def on_the_hour(self):\n        pass\n')
    assert load_handler_class(handler_file(tmp_path, body))


def test_knarr_run_exits_2_with_file_and_line_for_a_broken_handler(tmp_path):
    spec = handler_file(tmp_path, "import knarr\n\nclass Handler(knarr.BaseHandler)\n    pass\n")
    config = tmp_path / "knarr.yaml"
    config.write_text("sinks: {filesystem: {out: {base_path: out}}}\nmetrics: {enabled: false}\n")
    proc = subprocess.run([sys.executable, "-m", "knarr.cli", "run", "--config", str(config), "--handler", spec],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == ExitCode.USAGE
    assert proc.stderr.startswith(f"knarr run: {tmp_path / 'handler.py'}:3: SyntaxError")
    assert "Traceback" not in proc.stderr
