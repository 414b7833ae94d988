"""`planner.import_hf` and `planner.schema`: `plan import` and `plan schema` as functions; the commands call
them (planner/cli/hf_import.py, check.py)."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from planner.api import arguments as args
from planner.errors import SpecError, SpecErrors

if TYPE_CHECKING:
    from planner.specs.yamlio import LoadedYaml


@dataclass(frozen=True)
class ImportedModel:
    """`planner.import_hf`: the model spec YAML `plan import` writes (`text`) and its one-line `summary`."""

    text: str
    summary: str


def import_hf(config: str | os.PathLike, *, name: str | None = None, seq_len: int | None = None,
              global_batch: int | None = None, precision: str | None = None,
              overlay: str | os.PathLike | None = None) -> ImportedModel:
    """A Hugging Face config.json (a path, or one shipped in configs/hf/) as a model spec YAML, as `plan import`
    writes it, validated as `plan search` would load it; `overlay`: a YAML mapping merged over it."""
    args.typed(config, (str, os.PathLike), "CONFIG"), args.typed(overlay, (str, os.PathLike), "--overlay")
    args.typed(name, str, "--name"), args.typed(precision, str, "--precision")
    args.typed(seq_len, int, "--seq-len"), args.typed(global_batch, int, "--global-batch")
    text, summary = import_config(Path(config), name=name, seq_len=seq_len, global_batch=global_batch,
                                  precision=precision, overlay=None if overlay is None else Path(overlay))
    return ImportedModel(text, summary)


def schema(kind: str | None = None) -> dict[str, Any]:
    """The JSON Schema of a spec file kind (gpu | cluster | model | stack | layout | plan | sweep | jobs | runs |
    profile), for editors, as `plan schema` prints it; without `kind` one schema for any of them."""
    from planner.specs.schema import any_schema, json_schema

    args.typed(kind, str, "KIND")
    return any_schema() if kind is None else json_schema(kind)


def import_config(config: Path, *, name: str | None = None, seq_len: int | None = None,
                  global_batch: int | None = None, precision: str | None = None,
                  overlay: Path | None = None) -> tuple[str, str]:
    """(the YAML text, a one-line summary) for CONFIG; validated as `plan search` would load it."""
    from planner.specs.hf import is_hf_config, spec_yaml
    from planner.specs.loading import hf_import, load_spec_file, resolve, validate
    from planner.options import GLOBAL_BATCH, SEQ_LEN, check_option
    from planner.specs import ModelSpec
    from planner.specs.yamlio import load_yaml_file

    check_option(SEQ_LEN, seq_len)
    check_option(GLOBAL_BATCH, global_batch)
    loaded = load_spec_file(resolve(config, "model"))
    if not is_hf_config(loaded.data):
        raise SpecError("not a Hugging Face config.json (no model_type or architectures key)", file=loaded.file,
                        line=1, expected="a Hugging Face config.json")
    extra = load_yaml_file(overlay) if overlay is not None else None
    given = dict(seq_len=seq_len, global_batch=global_batch, precision=precision)
    imported, as_loaded = hf_import(loaded, loaded.data, name=name, overlay=extra.data if extra else None, **given)
    flags = {path: flag for path, (arg, flag) in _FLAGS.items() if given[arg] is not None}
    try:
        spec = validate(ModelSpec, as_loaded.data, as_loaded)
    except SpecErrors as exc:
        raise SpecErrors([_blame(e, flags, extra) for e in exc.errors]) from None
    except SpecError as exc:
        raise _blame(exc, flags, extra) from None
    text = spec_yaml(imported, loaded.file)
    summary = (f"{imported.family} family, {spec.total_params() / 1e9:,.2f}B parameters"
               + (f" ({spec.active_params() / 1e9:,.2f}B active)" if spec.moe else ""))
    return text, summary


# spec path -> (the import_config argument that sets it, its flag); a flag wins over the overlay
_FLAGS = {("seq_len",): ("seq_len", "--seq-len"), ("training", "global_batch"): ("global_batch", "--global-batch"),
          ("training", "precision"): ("precision", "--precision")}


def _from_overlay(data: Any, path: tuple) -> tuple | None:
    """The overlay's own key path for spec `path` when the overlay set that value (the key itself, or a
    scalar or list the overlay put in place of the mapping above it); None when it did not."""
    keys: list = []
    for part in path:
        if not isinstance(data, dict):
            return tuple(keys)
        if part not in data:
            return None
        keys.append(part)
        data = data[part]
    return tuple(keys)


def _blame(exc: SpecError, flags: dict[tuple, str], overlay: LoadedYaml | None) -> SpecError:
    """`exc` (found in the imported spec) pointed at where its value came from: the flag that set it
    (no file), else the overlay file and line, else the HF config as it was."""
    path = tuple(exc.path.split(".")) if exc.path else ()
    for prefix, flag in flags.items():
        if path[:len(prefix)] == prefix:
            return SpecError(exc.message, path=flag, expected=exc.expected)
    keys = _from_overlay(overlay.data, path) if overlay is not None and path else None
    if keys is None:
        return exc
    return SpecError(exc.message, file=overlay.file, line=overlay.line_of(keys), path=exc.path,
                     expected=exc.expected)


