"""No input reaches a launch line as shell syntax (issue 38): whatever a model's name or its recompute modules hold,
every export's text, run by bash, hands the program exactly the words the planner meant (`Export.argv`), runs
nothing else, creates no file, expands no glob, and each note stays one `# ...` line.

The harness runs the text as printed, in a folder holding files named as an unquoted word would glob-match
(`model.moe_layer_freq=0`, ...), and once more under `shopt -s failglob` in an empty folder. Commands are stubs
that record their words: a `python` function for Megatron-Bridge's command; for the formats without a command
(megatron's flags, nemo's and torchtitan's overrides) a stub word `_argv` put before each line that starts a
command; bash's command_not_found_handle records anything else that would run."""
from __future__ import annotations

import ast
import os
import re
import shlex
import subprocess
import tempfile
import unicodedata
from dataclasses import replace
from functools import cache
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st

from planner.estimate import estimate_layout
from planner.export import EXPORTS, export_settings
from planner.export.bridge import RECIPES
from planner.export.torchtitan import HEADERS
from planner.results import PowerCapLevel
from planner.specs.loading import load_cluster, load_model

CONTROL = {"Cc", "Cf", "Cs", "Zl", "Zp"}  # what no printed line may hold raw
PRELUDE = """_argv() { printf '%s\\0' "$@" >> "$ARGV_OUT"; }
python() { _argv "$@"; }
command_not_found_handle() { _argv "$@"; }
"""
# newlines, command substitution, quotes, globs, separators, comments, CR, ESC, U+2028/2029, U+0085, a bidi
# override, a lone surrogate, non-ASCII letters
HOSTILE = list("\n\r\t\x1b\x00\x85\u2028\u2029\u202e\ud800$()`'\"*?[]{}~;&|#<>!\\ =,.-_/") + ["$(", "${", "é", "模", "😀"]
hostile_text = st.lists(st.sampled_from(HOSTILE) | st.characters(codec="utf-8"), min_size=1, max_size=24).map("".join)


@cache
def base(zero: int = 3):
    """DeepSeek-V3 at selective recompute, MoE after 3 dense layers (Bridge's moe_layer_freq list), an uneven split
    (the layout strings), TP overlap (NeMo's callbacks line): every kind of list and glob character the exports write.
    DeepSpeed's pipeline engine runs ZeRO 0/1 only: its export takes zero 1."""
    m, c = load_model("deepseek-v3"), load_cluster("dgx-h100-16384")
    scored = estimate_layout(m, c, tp=2, pp=16, ep=64, micro_batch=1, sequence_parallel=True, zero=zero,
                             recompute="selective", gpus=2048)
    return m, c, scored


def _variant(name: str, modules: tuple[str, ...] | None):
    """The base model renamed, with these recompute modules: set past the spec's validation (its Literal allows
    six names), to show that the renderer, not the validation alone, keeps them words."""
    m = base()[0]
    return m.model_copy(update={"name": name, "training": m.training.model_copy(update={"recompute_modules": modules})})


def _refuses(kind: str, modules: tuple[str, ...] | None) -> bool:
    """Where an export must refuse rather than write: a word holding a control character (megatron writes modules
    as words), a Bridge list item Hydra would not read as a plain name."""
    if not modules:
        return False
    if kind == "megatron":
        return any(unicodedata.category(ch) in CONTROL for s in modules for ch in s)
    return kind == "megatron-bridge" and not all(re.fullmatch(r"[A-Za-z_]\w*", s, re.ASCII) for s in modules)


def _decoys(argv: tuple[str, ...]) -> set[str]:
    """File names an unquoted word would glob-match: `[...]` by its first character, `*` by nothing, `?` by x."""
    out = set()
    for w in argv:
        name = re.sub(r"\[!?(.)[^\]]*\]", r"\1", w).replace("*", "").replace("?", "x")
        if "=" in w:
            out.add(w.split("=", 1)[0] + "=1")
        out.add(name)
    return {n for n in out if n and "/" not in n and "\0" not in n and n not in (".", "..") and len(n.encode()) < 250}


def stubbed(text: str) -> str:
    """`_argv ` before each line that starts a command (not a comment, not continuing a line ending in ` \\`)."""
    out, continued = [], False
    for line in text.split("\n"):
        out.append(line if continued or line.startswith("#") or not line else "_argv " + line)
        continued = line.endswith(" \\") and not line.startswith("#")
    return "\n".join(out)


def run_bash(text: str, argv: tuple[str, ...], *, failglob: bool) -> tuple[list[str], set[str], int]:
    """(the words the stubs received, the files in the working folder afterwards, bash's exit status)."""
    with tempfile.TemporaryDirectory() as work, tempfile.TemporaryDirectory() as aside:
        work, aside = Path(work), Path(aside)
        if not failglob:
            for name in _decoys(argv):
                (work / name).write_text("")
        before = {p.name for p in work.iterdir()}
        script, out = aside / "launch.sh", aside / "argv"
        script.write_text(PRELUDE + ("shopt -s failglob\n" if failglob else "") + text + "\n", encoding="utf-8")
        env = {"PATH": os.environ["PATH"], "ARGV_OUT": str(out), "LC_ALL": "C.UTF-8", "HOME": str(aside)}
        done = subprocess.run(["bash", str(script)], cwd=work, env=env, capture_output=True, timeout=20)
        words = out.read_bytes().decode("utf-8").split("\0")[:-1] if out.exists() else []
        created = {p.name for p in work.iterdir()} - before
        return words, created, done.returncode


def check_text(kind: str, export) -> None:
    """The checks every export's text must pass."""
    text = export.text
    # one line per note: no raw control character anywhere but the line breaks
    assert not [c for c in text if c != "\n" and unicodedata.category(c) in CONTROL], repr(text)
    assert all("\n" not in n and not any(unicodedata.category(c) in CONTROL for c in n) for n in export.notes)
    if kind == "deepspeed":
        return  # JSON (json.dumps); its notes go to stderr, checked above
    comment_lines = [line for line in text.splitlines() if line.startswith("#") and line not in HEADERS.values()]
    assert comment_lines == [f"# {n}" for n in export.notes]  # every note one line, nothing else a comment
    assert subprocess.run(["bash", "-n"], input=text.encode(), capture_output=True).returncode == 0
    run = text if kind == "megatron-bridge" else stubbed(text)
    for failglob in (False, True):
        words, created, status = run_bash(run, export.argv, failglob=failglob)
        assert (words, created, status) == (list(export.argv), set(), 0), (kind, failglob)


def _hostile(kind: str, name: str, modules: tuple[str, ...] | None):
    m, c, scored = base(1 if kind == "deepspeed" else 3)
    model = _variant(name, modules)
    capped = replace(scored, power_cap=PowerCapLevel(power_cap_w=300.0, power_cap_speed=0.9))
    if _refuses(kind, modules):
        with pytest.raises(ValueError):
            export_settings(kind, capped, model, c)
        return None
    export = export_settings(kind, capped, model, c)
    check_text(kind, export)
    return export


@pytest.mark.parametrize("kind", EXPORTS)
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=hostile_text)
@example(name="x\ntouch PWNED_$(id -u) `id` ; ls * #")
@example(name="a\r\x1b[2K\u2028b\u2029c\x85d'\"$HOME;&|<>*?[x]")
def test_a_hostile_model_name_stays_in_its_comment(kind, name):
    export = _hostile(kind, name, ("core_attn", "mlp"))
    if kind == "megatron-bridge" and name not in RECIPES:  # the one export whose notes name the model
        assert f"# Megatron-Bridge v0.6.0 ships no recipe of {_escaped(name)}: the generic" in export.text


def _escaped(text: str) -> str:
    """What a note shows of `text`: each control character as the escape Python would write for it."""
    named = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
    return "".join(named.get(c) or (f"\\x{ord(c):02x}" if ord(c) < 256 else f"\\u{ord(c):04x}" if ord(c) < 65536
                                    else f"\\U{ord(c):08x}") if unicodedata.category(c) in CONTROL else c for c in text)


@pytest.mark.parametrize("kind", ("megatron", "nemo", "megatron-bridge"))
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(modules=st.lists(hostile_text, min_size=1, max_size=3).map(tuple))
@example(modules=("$(touch PWNED)", "`id`", "*", "a b", "'", '"', "#c", "x;y"))
@example(modules=("core_attn", "moe_act"))  # plain names: every export writes them
def test_hostile_recompute_modules_stay_words(kind, modules):
    export = _hostile(kind, "m", modules)
    if export is None:
        return
    if kind == "megatron":
        k = export.argv.index("--recompute-modules")
        assert export.argv[k + 1:k + 1 + len(modules)] == modules
    elif kind == "nemo":  # NeMo-Run's parse_list: ast.literal_eval of the value
        [value] = [w.split("=", 1)[1] for w in export.argv if w.startswith("model.config.recompute_modules=")]
        assert ast.literal_eval(value) == list(modules)
    else:
        assert f"model.recompute_modules=[{','.join(modules)}]" in export.argv


def test_nemo_recompute_modules_are_a_python_literal():
    # NeMo-Run v0.4.0 parse_list: ast.literal_eval(value), which cannot read `[core_attn,mlp]`
    m, c, scored = base()
    export = export_settings("nemo", scored, _variant("deepseek-v3", ("core_attn", "mlp", "moe_act")), c)
    [word] = [w for w in export.argv if w.startswith("model.config.recompute_modules=")]
    assert ast.literal_eval(word.split("=", 1)[1]) == ["core_attn", "mlp", "moe_act"]
    assert shlex.quote(word) in export.text.splitlines()
    with pytest.raises(ValueError):
        ast.literal_eval("[core_attn,mlp]")


def test_list_overrides_are_one_quoted_word():
    # the words the issue found unquoted: a file named model.moe_layer_freq=0 rewrote Bridge's list. ZeRO-1: on the
    # H100 Megatron FSDP (ZeRO-2/3) with tp 2 drops TP overlap and with it NeMo's callbacks line
    m, c, scored = base(zero=1)
    model = _variant("deepseek-v3", ("core_attn", "mlp"))
    bridge = export_settings("megatron-bridge", scored, model, c)
    freq = "model.moe_layer_freq=[" + ",".join(["0"] * 3 + ["1"] * 58) + "]"
    assert freq in bridge.argv and f"'{freq}' \\" in bridge.text.splitlines()
    assert "'model.recompute_modules=[core_attn,mlp]' \\" in bridge.text.splitlines()
    nemo = export_settings("nemo", scored, model, c).text.splitlines()
    assert "'model.config.recompute_modules=[\"core_attn\", \"mlp\"]'" in nemo
    assert any(line.startswith("'trainer.callbacks+=[nemo.lightning.") for line in nemo)
    # plain words stay as they were
    assert "model.tensor_model_parallel_size=2 \\" in bridge.text.splitlines()
    assert "trainer.strategy.tensor_model_parallel_size=2" in nemo


def test_the_harness_catches_unquoted_words():
    # the old text (words unquoted) fails it: decoys rewrite the glob, failglob stops the line
    argv = ("scripts/training/run_recipe.py", "model.moe_layer_freq=[0,0,1]", "model.recompute_modules=[core_attn,mlp]")
    old = "python " + " \\\n".join(argv)
    assert run_bash(old, argv, failglob=False)[0] != list(argv)
    assert run_bash(old, argv, failglob=True)[2] != 0
    assert run_bash("python " + " \\\n".join(map(shlex.quote, argv)), argv, failglob=True) == (list(argv), set(), 0)
    words, created, _ = run_bash("# x\ntouch PWNED #\n", (), failglob=False)
    assert created == {"PWNED"}


def test_the_issues_reproduction_through_the_cli(tmp_path):
    # issue 38: a YAML `name:` with a newline and $(...), `plan search ... --export megatron-bridge`, then bash
    import yaml
    from typer.testing import CliRunner

    from planner.cli.main import app

    spec = yaml.safe_load((Path(__file__).parents[2] / "configs" / "models" / "llama3.1-8b.yaml").read_text())
    spec["name"] = "x\ntouch PWNED_$(id -u) `id` ; ls * #"
    (tmp_path / "evil.yaml").write_text(yaml.safe_dump(spec))
    r = CliRunner().invoke(app, ["estimate", str(tmp_path / "evil.yaml"), "dgx-h100-1024", "--gpus", "64", "--tp", "2",
                                 "--pp", "1", "--micro-batch", "1", "--export", "megatron-bridge"])
    assert r.exit_code == 0, r.output
    assert "# Megatron-Bridge v0.6.0 ships no recipe of x\\ntouch PWNED_$(id -u) `id` ; ls * #: the generic" in r.stdout
    words, created, status = run_bash(r.stdout, (), failglob=False)
    assert created == set() and status == 0 and words[:2] == ["scripts/training/run_recipe.py", "--recipe"]


@pytest.mark.parametrize("kind", EXPORTS)
@pytest.mark.parametrize("recipe", ["delayed", "tensorwise", "blockwise"])
def test_compile_and_fp8_recipe_lines_keep_a_hostile_name_a_comment(kind, recipe):
    # the sixth session's words (--compile.enable, --fp8-recipe, Bridge's scaling recipes, torchtitan's selective
    # options): Llama 3.1 8B under FP8 with each recipe, compiled, selective recompute, its name a shell attack
    m0, c = load_model("llama3.1-8b"), load_cluster("dgx-h100-1024")
    m = m0.model_copy(update={"name": "x\ntouch PWNED_$(id -u) `id` ; ls * #\u2028--help", "training": m0.training.model_copy(
        update={"precision": "fp8", "fp8_recipe": recipe, "torch_compile": True})})
    zero = 3 if kind.startswith("torchtitan") else 1  # torchtitan has no ZeRO-1, DeepSpeed's pipeline no ZeRO-3
    scored = estimate_layout(m, c, tp=2, pp=2, micro_batch=1, sequence_parallel=True, zero=zero, recompute="selective",
                             gpus=64)
    export = export_settings(kind, scored, m, c)
    check_text(kind, export)
    if kind == "megatron":
        assert export.argv[export.argv.index("--fp8-recipe") + 1] == recipe
    if kind.startswith("torchtitan"):  # every torchtitan version takes the compile flag
        assert "--compile.enable" in export.argv
