"""The operator's settings: one model, read from KNARR_OPERATOR_* variables; the chart values and docs generated from it."""

from __future__ import annotations

import os
import subprocess
import sys

import annotated_types
import pytest

from knarr_operator.crd import repo_root
from knarr_operator.settings import OperatorSettings, SettingsError, generated_files


def test_the_charts_operator_values_and_the_readme_table_match_the_model_run_the_settings_write_command_if_not():
    for path, expected in generated_files(repo_root()).items():
        assert path.read_text() == expected, f"{path} is stale; run `python -m knarr_operator.settings --write` (make docs)"


def test_without_variables_every_setting_has_its_default():
    assert OperatorSettings.from_env({}) == OperatorSettings()
    assert OperatorSettings().resync_seconds == 15


def test_settings_come_from_knarr_operator_variables():
    settings = OperatorSettings.from_env({"KNARR_OPERATOR_RESYNC_SECONDS": "2.5", "KNARR_OPERATOR_MAX_WORKERS": "3",
                                          "KNARR_OPERATOR_LOG_LEVEL": "debug", "PATH": "/usr/bin"})
    assert (settings.resync_seconds, settings.max_workers, settings.log_level) == (2.5, 3, "debug")


def test_an_unknown_variable_is_refused_naming_it_and_the_known_ones():
    with pytest.raises(SettingsError) as err:
        OperatorSettings.from_env({"KNARR_OPERATOR_RESYNC_SECOND": "5"})
    assert str(err.value).startswith("unknown operator setting(s) KNARR_OPERATOR_RESYNC_SECOND; the settings are KNARR_OPERATOR_ALLOW_DEBUG, KNARR_OPERATOR_LAG_TIMEOUT_SECONDS, ")


def test_a_value_out_of_range_is_refused_naming_the_variable_and_the_value():
    with pytest.raises(SettingsError) as err:
        OperatorSettings.from_env({"KNARR_OPERATOR_RESYNC_SECONDS": "0"})
    assert str(err.value) == "invalid operator setting: KNARR_OPERATOR_RESYNC_SECONDS='0': Input should be greater than or equal to 1"


def test_every_numeric_setting_has_a_lower_and_an_upper_bound():
    for name, field in OperatorSettings.model_fields.items():
        if field.annotation in (int, float):
            kinds = {type(m) for m in field.metadata}
            assert kinds & {annotated_types.Ge, annotated_types.Gt} and kinds & {annotated_types.Le, annotated_types.Lt}, name


def test_the_operator_refuses_to_start_with_a_bad_setting_in_one_line_naming_it():
    env = {**os.environ, "KNARR_OPERATOR_MAX_WORKERS": "many"}
    proc = subprocess.run([sys.executable, "-m", "knarr_operator"], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.startswith("knarr-operator: invalid operator setting: KNARR_OPERATOR_MAX_WORKERS='many': Input should be a valid integer")
