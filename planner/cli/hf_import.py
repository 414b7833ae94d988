"""`plan import` (registered on the main app): a Hugging Face config.json in, a model spec YAML out;
planner/specs/hf.py does the mapping."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape

from planner.cli.common import err, run
from planner.errors import clip_file


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
            from planner import api

            made = api.import_hf(config, name=name, seq_len=seq_len, global_batch=global_batch, precision=precision,
                                 overlay=overlay)
            text, summary = made.text, made.summary
            if output is None:
                sys.stdout.write(text)  # the guarded stdout (planner/cli/edge.py): closed or full is exit 2
                err.print(f"{escape(clip_file(str(config)))}: {summary}", highlight=False, soft_wrap=True)
                return
            write_atomic(output, text, "--output", inputs)
            err.print(f"wrote {escape(clip_file(str(output)))}: {summary}", highlight=False, soft_wrap=True)

        run(go)
