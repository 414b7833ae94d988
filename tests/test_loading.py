"""planner.loading: specs from files and shipped names; every problem a SpecError with file, line, path."""
from __future__ import annotations

from pathlib import Path

import pytest

from planner.errors import SpecError, SpecErrors
from planner.loading import describe, load_cluster, load_gpu, load_model, resolve, shipped_names

CONFIGS = Path(__file__).resolve().parent.parent / "configs"
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
