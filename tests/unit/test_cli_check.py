"""`knarr --version` and `knarr check`: what a person runs before deploying, without any service."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import yaml

from knarr import __version__
from knarr.config.masking import masked
from knarr.errors import ExitCode

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "examples" / "quickstart"


def knarr(*args: str, cwd: Path | None = None, env: dict | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "knarr.cli", *args], capture_output=True, text=True, timeout=60,
                          cwd=cwd, env=env)


def test_knarr_version_names_knarr_python_and_the_kafka_client():
    proc = knarr("--version")
    assert proc.returncode == 0
    assert proc.stdout.startswith(f"knarr {__version__} (Python 3.")
    assert "confluent-kafka" in proc.stdout and "librdkafka" in proc.stdout


def test_check_accepts_the_quickstart_and_prints_its_resolved_configuration():
    proc = knarr("check", "--config", str(QUICKSTART / "knarr.yaml"))
    assert proc.returncode == 0, proc.stderr
    assert f"handler: {QUICKSTART / 'handler.py'}:WordCounter: ok (hooks: arrange, on_task_complete, on_error)" in proc.stdout
    resolved = yaml.safe_load(proc.stdout.split("(credentials masked)", 1)[1])
    assert resolved["source"]["local"]["path"] == str(QUICKSTART / "input.jsonl")
    assert resolved["executor"]["window_size"] == 10


def test_check_accepts_the_tool_variables_of_the_dev_scripts_in_the_environment(tmp_path):
    env = {**os.environ, "KNARR_BIN_DIR": str(tmp_path / "bin")}
    proc = knarr("check", "--config", str(QUICKSTART / "knarr.yaml"), env=env)
    assert proc.returncode == 0, proc.stderr
    assert "ok (hooks:" in proc.stdout


def test_check_refuses_an_override_missing_one_underscore_and_names_the_right_one():
    env = {**os.environ, "KNARR_EXECUTOR_MAX_EXECUTORS": "8"}
    proc = knarr("check", "--config", str(QUICKSTART / "knarr.yaml"), env=env)
    assert proc.returncode == ExitCode.USAGE
    assert "KNARR_EXECUTOR_MAX_EXECUTORS: not a config override; did you mean KNARR_EXECUTOR__MAX_EXECUTORS?" in proc.stderr


def test_check_masks_credentials_in_what_it_prints(tmp_path):
    config = tmp_path / "knarr.yaml"
    config.write_text(
        "kafka: {extra: {sasl.username: app, sasl.password: hunter2}}\n"
        "sinks:\n"
        "  filesystem: {out: {base_path: out}}\n"
        "  kafka: {results: {topic: out, extra: {ssl.key.password: s3cret}}}\n"
    )
    proc = knarr("check", "--config", str(config), "--handler", f"{QUICKSTART / 'handler.py'}:WordCounter")
    assert proc.returncode == 0, proc.stderr
    resolved = yaml.safe_load(proc.stdout.split("(credentials masked)", 1)[1])
    assert resolved["kafka"]["extra"] == {"sasl.username": "app", "sasl.password": "***"}
    assert resolved["sinks"]["kafka"]["results"]["extra"] == {"ssl.key.password": "***"}
    assert "hunter2" not in proc.stdout and "s3cret" not in proc.stdout


def test_masking_hides_passwords_inside_connection_strings_and_auth_headers():
    data = {"dsn": "postgresql://app:pg-pass@db:5432/app", "conn": "host=db user=app password=pw1 dbname=x",
            "headers": {"Authorization": "Bearer tok", "Accept": "application/json"}, "port": 5432}
    assert masked(data) == {"dsn": "postgresql://app:***@db:5432/app", "conn": "host=db user=app password=*** dbname=x",
                            "headers": {"Authorization": "***", "Accept": "application/json"}, "port": 5432}


def test_check_reports_a_bad_postgres_sink_setting_without_printing_its_credentials(tmp_path):
    config = tmp_path / "knarr.yaml"
    config.write_text("sinks: {postgres: {db: {dsn: 'postgresql://app:pg-pass@db/app', command_timeout_seconds: 0}}}\n")
    proc = knarr("check", "--config", str(config), "--handler", f"{QUICKSTART / 'handler.py'}:WordCounter")
    assert proc.returncode == ExitCode.USAGE
    assert "sinks.postgres.db.command_timeout_seconds: Input should be greater than 0" in proc.stderr
    assert "pg-pass" not in proc.stderr + proc.stdout


def test_check_shows_a_postgres_sink_with_its_password_masked(tmp_path):
    config = tmp_path / "knarr.yaml"
    config.write_text("sinks: {postgres: {db: {dsn: 'postgresql://app:pg-pass@db/app'}}}\n")
    proc = knarr("check", "--config", str(config), "--handler", f"{QUICKSTART / 'handler.py'}:WordCounter")
    assert proc.returncode == 0, proc.stderr
    assert "postgresql://app:***@db/app" in proc.stdout
    assert "pg-pass" not in proc.stderr + proc.stdout


def test_check_reports_config_and_handler_problems_together_with_exit_code_2(tmp_path):
    config = tmp_path / "knarr.yaml"
    config.write_text("executor: {max_executors: 0}\nsinks: {filesystem: {out: {base_path: out}}}\n")
    (tmp_path / "handler.py").write_text("import knarr\nclass H(knarr.BaseHandler):\n    async def on_task_complet(self, r): ...\n")
    proc = knarr("check", "--config", str(config), "--handler", f"{tmp_path / 'handler.py'}:H")
    assert proc.returncode == ExitCode.USAGE
    assert "executor.max_executors: Input should be greater than or equal to 1" in proc.stderr
    assert "H does not define arrange()" in proc.stderr
    assert "did you mean 'on_task_complete'?" in proc.stderr


def test_check_never_connects_so_it_answers_at_once_for_an_unreachable_broker(tmp_path):
    config = tmp_path / "knarr.yaml"
    config.write_text("kafka: {brokers: '127.0.0.1:1', startup_timeout_seconds: 30}\n"
                      "sinks: {kafka: {out: {topic: results}}}\n")
    started = time.monotonic()
    proc = knarr("check", "--config", str(config), "--handler", f"{QUICKSTART / 'handler.py'}:WordCounter")
    assert proc.returncode == 0, proc.stderr
    assert time.monotonic() - started < 15  # far below the 30 s a connection attempt would wait


def test_check_warns_about_a_handler_whose_output_goes_nowhere(tmp_path):
    (tmp_path / "handler.py").write_text("import knarr\nclass H(knarr.BaseHandler):\n"
                                         "    async def arrange(self, messages, pending):\n        return []\n")
    config = tmp_path / "knarr.yaml"
    config.write_text("handler: handler.py:H\nsinks: {filesystem: {out: {base_path: out}}}\n")
    proc = knarr("check", "--config", str(config))
    assert proc.returncode == 0
    assert "warning: H overrides none of on_task_complete, on_message_complete, on_window_complete" in proc.stdout


def test_run_without_any_handler_says_how_to_name_one(tmp_path):
    config = tmp_path / "knarr.yaml"
    config.write_text("sinks: {filesystem: {out: {base_path: out}}}\n")
    proc = knarr("run", "--config", str(config))
    assert proc.returncode == ExitCode.USAGE
    assert "no handler: pass --handler module:Class" in proc.stderr


def test_check_warns_that_a_local_source_without_dlq_path_dead_letters_to_the_kafka_topic(tmp_path):
    config = tmp_path / "knarr.yaml"
    config.write_text(f"source: {{type: local, local: {{path: {tmp_path / 'in.jsonl'}}}}}\n"
                      f"sinks: {{filesystem: {{out: {{base_path: {tmp_path / 'out'}}}}}}}\n"
                      "kafka: {brokers: 'kafka-1:9092', source_topic: orders}\n")
    proc = knarr("check", "--config", str(config), "--handler", "knarr.demo.handler:SearchHandler")
    assert proc.returncode == 0, proc.stderr
    assert ("warning: the source is local but dlq.path is empty: dead letters go to the Kafka topic 'orders_dlq' at "
            "'kafka-1:9092'; set dlq.path to keep them in a file") in proc.stdout


def test_check_warns_about_a_persistent_program_that_is_not_there(tmp_path):
    config = tmp_path / "knarr.yaml"
    config.write_text("sinks: {filesystem: {out: {base_path: out}}}\n"
                      "executor: {persistent: {command: [no-such-task-program, --serve]}}\n")
    proc = knarr("check", "--config", str(config), "--handler", "knarr.demo.handler:SearchHandler")
    assert proc.returncode == 0, proc.stderr
    assert ("warning: executor.persistent.command's program 'no-such-task-program' is not an executable file on "
            "this machine (searched in $PATH): a worker refuses to start where it cannot run") in proc.stdout


def test_check_warns_about_an_executor_binary_that_cannot_run_here(tmp_path):
    config = tmp_path / "knarr.yaml"
    config.write_text("sinks: {filesystem: {out: {base_path: out}}}\nexecutor: {binary_path: no-such-tool}\n")
    proc = knarr("check", "--config", str(config), "--handler", "knarr.demo.handler:SearchHandler")
    assert proc.returncode == 0, proc.stderr
    assert ("warning: executor.binary_path 'no-such-tool' is not an executable file on this machine (searched in "
            "$PATH): a worker refuses to start where it cannot run") in proc.stdout


def test_check_warns_about_cache_tiers_configured_while_the_cache_is_off(tmp_path):
    config = tmp_path / "knarr.yaml"
    config.write_text("sinks: {filesystem: {out: {base_path: out}}}\n"
                      "cache: {shared: {url: 'redis://:secret@cache:6379/0'}}\n")
    proc = knarr("check", "--config", str(config), "--handler", "knarr.demo.handler:SearchHandler")
    assert proc.returncode == 0, proc.stderr
    assert "warning: cache.db_dir or cache.shared is set but cache.enabled is false" in proc.stdout
    assert "secret" not in proc.stdout
