"""planner.specs.loading: specs from files and shipped names; every problem a SpecError with file, line, path."""
from __future__ import annotations

from pathlib import Path

import pytest

from planner.errors import SpecError, SpecErrors
from planner.specs.loading import describe, load_cluster, load_gpu, load_model, resolve, shipped_names

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
MODEL = (CONFIGS / "models" / "gpt3-175b.yaml").read_text()
CLUSTER = (CONFIGS / "clusters" / "dgx-a100-1024.yaml").read_text()


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    return path


def test_shipped_names_resolve():
    assert "gpt3-175b" in shipped_names("model") and "a100-sxm-80gb" in shipped_names("gpu")
    assert resolve("gpt3-175b", "model") == CONFIGS / "models" / "gpt3-175b.yaml"
    assert resolve("m.yaml", "model", base=Path("plans")) == Path("plans/m.yaml")
    with pytest.raises(SpecError, match="did you mean 'gpt3-175b'"):
        resolve("gpt3-175", "model")


def test_kind_key_is_accepted_and_checked(tmp_path):
    assert load_model(write(tmp_path, "kind: model\n" + MODEL)).name == "gpt3-175b"
    with pytest.raises(SpecError) as info:
        load_model(write(tmp_path, "kind: cluster\n" + MODEL))
    assert "this is a cluster file, but a model spec is expected" in info.value.message and info.value.line == 1


def test_cross_field_rules_point_at_their_field(tmp_path):
    with pytest.raises(SpecError) as info:
        load_model(write(tmp_path, MODEL.replace("heads: 96", "heads: 95")))
    assert info.value.path == "heads" and info.value.line == MODEL.splitlines().index("heads: 96") + 1


def test_missing_keys_are_named(tmp_path):
    with pytest.raises(SpecErrors) as info:
        load_model(write(tmp_path, "name: x\nlayers: 2\n"))
    assert "missing required key 'hidden'" in [e.message for e in info.value.errors]


def test_cluster_reports_preset_and_other_errors_together(tmp_path):
    text = CLUSTER.replace("gpu: a100-sxm-80gb", "gpu: nope").replace("nodes: 128", "nodes: -1")
    with pytest.raises(SpecErrors) as info:
        load_cluster(write(tmp_path, text))
    assert sorted(e.path for e in info.value.errors) == ["gpu", "nodes"]


def test_preset_list_is_given(tmp_path):
    with pytest.raises(SpecError) as info:
        load_cluster(write(tmp_path, CLUSTER.replace("gpu: a100-sxm-80gb", "gpu: nope")))
    assert all(name in info.value.expected for name in shipped_names("gpu"))


def test_loading_does_not_write(tmp_path):
    path = write(tmp_path, MODEL)
    before = path.stat().st_mtime_ns, path.read_bytes()
    load_model(path)
    assert (path.stat().st_mtime_ns, path.read_bytes()) == before


@pytest.mark.parametrize("value, text", [(True, "the boolean true"), ("96", "the string '96'"), ([1], "a list"),
                                         ({}, "a mapping"), (None, "null"), (1.5, "1.5")])
def test_describe(value, text):
    assert describe(value) == text


def test_gpu_loads():
    assert load_gpu("a100-sxm-80gb").memory_gib == 80


# Names that are names, bounded messages (issue 15).
@pytest.mark.parametrize("name, plain", [("a100-sxm-80gb", True), ("gpt3-1.3b", True), ("x_y+z", True),
                                         ("../models/gpt3-175b", False), ("/etc/passwd", False), ("..", False),
                                         ("a..b", False), (".hidden", False), ("a/b", False), ("a\\b", False),
                                         ("a" * 128, True), ("a" * 129, False), ("", False), ("a\nb", False)])
def test_plain_names(name, plain):
    from planner.specs import is_plain_name

    assert is_plain_name(name) is plain


@pytest.mark.parametrize("gpu", ["../models/gpt3-175b", str(CONFIGS / "gpus" / "a100-sxm-80gb"), "x" * 300])
def test_gpu_preset_is_never_a_path(tmp_path, gpu):
    with pytest.raises(SpecError) as info:
        load_cluster(write(tmp_path, CLUSTER.replace("gpu: a100-sxm-80gb", f"gpu: {gpu}")))
    err = info.value
    assert "is not a shipped preset name" in err.message and err.path == "gpu"
    assert err.file == str(tmp_path / "spec.yaml")
    assert err.line == CLUSTER.splitlines().index("gpu: a100-sxm-80gb") + 1 and len(str(err)) < 1000


@pytest.mark.parametrize("arg", ["a" * 300, "a" * 300 + ".yaml", "nul\0name"])
def test_resolve_survives_any_name(arg):
    with pytest.raises(SpecError) as info:
        load_model(arg)
    assert len(str(info.value)) < 1000 and "\0" not in str(info.value)


def test_errors_per_file_are_capped(tmp_path):
    from planner.errors import MAX_ERRORS

    with pytest.raises(SpecErrors) as info:
        load_model(write(tmp_path, MODEL + "".join(f"k{i}: 1\n" for i in range(500))))
    errors = info.value.errors
    assert len(errors) == MAX_ERRORS + 1 and errors[0].path == "k0" and errors[0].line == len(MODEL.splitlines()) + 1
    assert errors[-1].message == f"and {500 - MAX_ERRORS} more problems (the first {MAX_ERRORS} are shown)"


def test_messages_are_bounded_and_on_one_line():
    from planner.errors import clip, printable

    assert clip("x" * 10) == "x" * 10 and clip("x" * 100) == "x" * 80 + "… (100 characters)"
    assert printable("a\nb\u2028c\x1b") == "a\\nb\\u2028c\\x1b" and printable("é:fire:") == "é:fire:"
    err = SpecError("bad " + "v" * 5000, file="dir/" + "f\n" * 500, path="p" * 5000, expected="e" * 5000)
    text = str(err)
    assert "\n" not in text and len(text) < 3000 and text.startswith("…") and "(1004 characters)" in text
    assert describe("s" * 1000) == f"the string '{'s' * 80}… (1000 characters)'"
