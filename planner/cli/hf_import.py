"""`plan import` (registered on the main app): a Hugging Face config.json in, a model spec YAML out;
planner/specs/hf.py does the mapping."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer
from rich.markup import escape

from planner.cli.common import err, run
from planner.errors import SpecError, SpecErrors, clip_file

if TYPE_CHECKING:
    from planner.specs.yamlio import LoadedYaml


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


def register(app: typer.Typer) -> None:
    @app.command("import")
    def import_cmd(
        config: Annotated[Path, typer.Argument(help="a Hugging Face config.json (or one shipped in configs/hf/)")],
        output: Annotated[Optional[Path], typer.Option("-o", "--output", help=(
            "write the model spec YAML here (default: stdout), whole or not at all: a temporary file in the same "
            "folder renamed over it; a symbolic link there or an input file is refused"))] = None,
        name: Annotated[Optional[str], typer.Option("--name", help="the spec's name (default: from the config or its folder)")] = None,
        seq_len: Annotated[Optional[int], typer.Option("--seq-len", help="training sequence length (default: min(max positions, 4096))")] = None,
        global_batch: Annotated[Optional[int], typer.Option("--global-batch", help="sequences per step (default: about 4M tokens)")] = None,
        precision: Annotated[Optional[str], typer.Option("--precision", help="bf16, fp16, fp8, mxfp8 or nvfp4 (default: bf16)")] = None,
        overlay: Annotated[Optional[Path], typer.Option("--overlay", help="a YAML mapping merged over the imported spec")] = None,
    ) -> None:
        """Turn a Hugging Face config.json into a model spec YAML (planner/specs/hf.py's mapping table)."""
        def go() -> None:
            from planner.atomic import check_output, write_atomic
            from planner.specs.loading import resolve

            inputs = (resolve(config, "model"), overlay)
            if output is not None:
                check_output(output, "--output", inputs)  # before the work: a symlink or an input is refused
            text, summary = import_config(config, name=name, seq_len=seq_len, global_batch=global_batch,
                                          precision=precision, overlay=overlay)
            if output is None:
                sys.stdout.write(text)  # the guarded stdout (planner/cli/edge.py): closed or full is exit 2
                err.print(f"{escape(clip_file(str(config)))}: {summary}", highlight=False, soft_wrap=True)
                return
            write_atomic(output, text, "--output", inputs)
            err.print(f"wrote {escape(clip_file(str(output)))}: {summary}", highlight=False, soft_wrap=True)

        run(go)
