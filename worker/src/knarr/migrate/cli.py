"""``knarr migrate-config DRAKKAR.yaml [-o OUT] [--env-file FILE]``: the I/O shell around migrate.drakkar.

Exit codes: 0 every key was carried over (or changes nothing in knarr); 1 some keys have no
equivalent, or the result is not a valid knarr config (each listed, with the reason; the
output is still written); 2 the input cannot be read.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TextIO

import yaml

from knarr.config.loading import ConfigError, config_from_dict
from knarr.migrate.drakkar import EnvMigration, Migration, migrate_config, migrate_env

ALL_MAPPED, SOME_DROPPED, UNREADABLE = 0, 1, 2


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="knarr migrate-config",
        description="Write the knarr config equivalent to a Drakkar config, and list what has no equivalent. "
                    "Exit 0: all carried over; 1: some keys were not (listed); 2: the input cannot be read.")
    parser.add_argument("drakkar_yaml", help="the Drakkar worker config (YAML)")
    parser.add_argument("-o", "--output", help="where to write the knarr config (default: stdout)")
    parser.add_argument("--env-file", help="NAME=VALUE lines (e.g. a deployment's env); its DK_* variables are "
                                           "renamed to KNARR_* (default: this process's environment)")
    parser.add_argument("--env-out", help="write the renamed KNARR_* variables here as NAME=VALUE lines")
    args = parser.parse_args(argv)
    try:
        tree = _read_yaml(Path(args.drakkar_yaml))
        env = _read_env_file(Path(args.env_file)) if args.env_file else dict(os.environ)
    except ValueError as exc:
        print(f"knarr migrate-config: {exc}", file=sys.stderr)
        return UNREADABLE

    migration = migrate_config(tree)
    env_migration = migrate_env(env)
    invalid = _validate(migration)
    text = "# Written by knarr migrate-config from " + args.drakkar_yaml + "\n" + yaml.safe_dump(
        migration.config, sort_keys=False, allow_unicode=True)
    if args.output:
        Path(args.output).write_text(text)
    else:
        sys.stdout.write(text)
    if args.env_out:
        Path(args.env_out).write_text("".join(f"{k}={v}\n" for k, v in env_migration.values.items()))
    _report(migration, env_migration, invalid, args, sys.stderr)
    complete = migration.complete and not env_migration.dropped and invalid is None
    return ALL_MAPPED if complete else SOME_DROPPED


def _read_yaml(path: Path) -> dict:
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ValueError(f"cannot read {str(path)!r}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ValueError(f"{str(path)!r} is not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{str(path)!r} must hold a mapping of sections (kafka:, executor:, sinks:, ...), "
                         f"not {type(data).__name__}")
    return data


def _read_env_file(path: Path) -> dict[str, str]:
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise ValueError(f"cannot read {str(path)!r}: {exc.strerror}") from None
    env = {}
    for number, line in enumerate(lines, 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, value = line.removeprefix("export ").partition("=")
        if not sep:
            raise ValueError(f"{str(path)}:{number}: expected NAME=VALUE, got {line!r}")
        env[name.strip()] = value.strip().strip('"').strip("'")
    return env


def _validate(migration: Migration) -> str | None:
    try:
        config_from_dict(migration.config)
    except ConfigError as exc:
        return str(exc)
    return None


def _report(migration: Migration, env: EnvMigration, invalid: str | None, args: argparse.Namespace,
            out: TextIO) -> None:
    target = args.output or "stdout"
    print(f"knarr migrate-config: {args.drakkar_yaml} -> {target}", file=out)
    renamed = [(old, new) for old, new in migration.moved if old != new]
    print(f"  carried over: {len(migration.moved)} keys ({len(renamed)} renamed)", file=out)
    for old, new in renamed:
        print(f"    {old} -> {new}", file=out)
    for key, value, why in migration.defaults:
        print(f"  set {key}: {value!r} — {why}", file=out)
    for key, why in migration.ignored:
        print(f"  ignored {key}: {why}", file=out)
    for old, new in env.renamed.items():
        print(f"  env {old} -> {new}", file=out)
    for name, why in env.ignored:
        print(f"  ignored env {name}: {why}", file=out)
    if migration.dropped or env.dropped:
        print("  NOT carried over (no knarr equivalent):", file=out)
        for key, why in migration.dropped:
            print(f"    {key}: {why}", file=out)
        for name, why in env.dropped:
            print(f"    env {name}: {why}", file=out)
    if invalid:
        print("  the result is not a valid knarr config yet:", file=out)
        print("    " + invalid.replace("\n", "\n    "), file=out)
