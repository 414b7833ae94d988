"""Where the shipped specs and data live, and the shipped software-stack profiles.

Kept apart from planner.specs.loading so that planner.specs can name a stack (`training.stack:
megatron-core`) without importing the loader.
"""
from __future__ import annotations

import difflib
import os
import sys
from functools import lru_cache
from pathlib import Path

from planner.specs.yamlio import load_yaml_file

KINDS = {"gpu": "gpus", "cluster": "clusters", "model": "models", "stack": "stacks"}
DEFAULT_STACK = "megatron-core"


def shared_dir(name: str) -> Path:
    """`name` beside the package (a source tree or an editable install), else under
    <prefix>/share/planner/ (where a wheel puts it)."""
    beside = Path(__file__).resolve().parents[2] / name  # planner/specs/shipped.py -> the tree
    if beside.is_dir():
        return beside
    return Path(sys.prefix) / "share" / "planner" / name


def config_dir() -> Path:
    """Shipped specs: $PLANNER_CONFIG_DIR, else the shipped `configs/`."""
    env = os.environ.get("PLANNER_CONFIG_DIR")
    return Path(env) if env else shared_dir("configs")


def shipped_names(kind: str) -> list[str]:
    folder = config_dir() / KINDS[kind]
    return sorted(p.stem for p in folder.glob("*.yaml")) if folder.is_dir() else []


def unknown_stack_message(name: str, with_names: bool = True) -> str:
    names = shipped_names("stack")
    close = difflib.get_close_matches(str(name), names, n=1)
    hint = f"; did you mean '{close[0]}'?" if close else ""
    listed = f" (shipped: {', '.join(names) or 'none'})" if with_names else ""
    return f"unknown software stack '{name}'{hint}{listed}"


def stack_file(name: str) -> Path | None:
    """The shipped stack profile of that name, or None."""
    if not isinstance(name, str) or not name or "/" in name or os.sep in name or name.startswith("."):
        return None
    if len(name) > 128 or "\0" in name:  # no shipped name is longer; the file system refuses > 255 bytes
        return None
    path = config_dir() / KINDS["stack"] / f"{name}.yaml"
    return path if path.is_file() else None


def stack_data(name: str) -> dict | None:
    """A shipped stack profile as a plain mapping (read strictly, `kind:` removed), or None when
    there is none of that name."""
    path = stack_file(name)
    return None if path is None else _read_stack(str(path))[0]


def stack_loaded(name: str):
    """(mapping, LoadedYaml) of a shipped stack profile; the file must exist."""
    return _read_stack(str(stack_file(name)))


@lru_cache(maxsize=64)
def _read_stack(path: str):
    loaded = load_yaml_file(path)
    data = loaded.data
    if isinstance(data, dict) and data.get("kind") == "stack":
        data = {k: v for k, v in data.items() if k != "kind"}
    return data, loaded
