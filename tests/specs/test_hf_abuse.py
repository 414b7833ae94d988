"""`plan import` under the second adversarial round (issue 31), each case as it was found: real
config.json files, real output files, a real file-size limit, real concurrent processes.

Sizes are checked before any loop depends on them; `-o` writes a temporary file and renames it (never
through a symlink, never onto an input); bad values give one line and exit 2, never exit 3."""
from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from .test_hf import _app

HF = Path(__file__).resolve().parents[1] / "data" / "hf"
PLAN = [sys.executable, "-c", "from planner.cli.main import app; app()"]




def _config(tmp_path: Path, fixture: str, name: str = "config.json", text: dict | None = None, **keys) -> Path:
    """A fixture's config.json with `keys` replaced (in its text_config when `text` is given)."""
    config = json.loads((HF / f"{fixture}.json").read_text())
    if text is not None:
        config["text_config"] = {**config["text_config"], **text}
    config.update(keys)
    path = tmp_path / name
    path.write_text(json.dumps(config, indent=2))
    return path


def _import(*args) -> tuple[int, str]:
    r = CliRunner().invoke(_app(), ["import", *map(str, args)])
    return r.exit_code, r.output


def _refused(args: tuple, *fragments: str) -> str:
    code, out = _import(*args)
    lines = out.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error:"), out
    assert all(f in out for f in fragments), out
    return out


# --- 1. sizes before loops ------------------------------------------------------------------------

_BIG = """
import json, sys
from typer.testing import CliRunner
from planner.cli.main import app
for path in sys.argv[1:]:
    r = CliRunner().invoke(app, ["import", path])
    print(json.dumps([r.exit_code, r.output]))
"""


def test_huge_layer_counts_are_refused_before_any_allocation(tmp_path):
    """1e10 (or 900 digits) layers reached 8.9 GB; gemma2 and deepseek_v3 with 1e9, 8.5 and 10.6 GB.
    Under a 2 GiB address-space limit (an import takes about 0.2) each must be a one-line exit 2 naming the key."""
    files = [_config(tmp_path, "llama", "a.json", num_hidden_layers=10**10),
             _config(tmp_path, "llama", "b.json", num_hidden_layers=int("9" * 900)),
             _config(tmp_path, "gemma2", "c.json", num_hidden_layers=10**9),
             _config(tmp_path, "deepseek_v3", "d.json", num_hidden_layers=10**9),
             _config(tmp_path, "gemma3", "e.json", text={"num_hidden_layers": 10**9})]
    limit = 2 << 30
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}  # no per-core buffers at import
    r = subprocess.run([sys.executable, "-c", _BIG, *map(str, files)], check=False, capture_output=True, text=True,
                       timeout=60, env=env,
                       preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit)))
    assert r.returncode == 0, r.stderr
    results = [json.loads(line) for line in r.stdout.splitlines()]
    assert len(results) == len(files)
    for (code, out), path in zip(results, files):
        assert code == 2 and out.count("\n") == 1, out
        assert "num_hidden_layers" in out and "from 1 to 10,000" in out and path.name in out, out
    assert "(900 characters)" in results[1][1]  # the count is cut, not echoed whole


def test_qwen2_sliding_window_layers_are_mapped_in_linear_time(tmp_path):
    """use_sliding_window with max_window_layers ran a quadratic search (30,000 layers: 40 s)."""
    path = _config(tmp_path, "qwen2", num_hidden_layers=10_000, use_sliding_window=True, sliding_window=4096,
                   max_window_layers=5_000)
    start = time.perf_counter()
    code, out = _import(path, "-o", tmp_path / "q.yaml")
    assert code == 0, out
    assert time.perf_counter() - start < 1.5  # the quadratic search took 4 s here
    assert yaml.safe_load((tmp_path / "q.yaml").read_text())["full_attention_every"] == 2  # 5,000 of 10,000 full
    _refused((_config(tmp_path, "qwen2", num_hidden_layers=30_000, use_sliding_window=True, max_window_layers=7),),
             "num_hidden_layers", "from 1 to 10,000")


def test_list_lengths_are_checked_against_the_layers(tmp_path):
    """A one-entry layer_types windowed every layer; transformers requires one entry per layer."""
    _refused((_config(tmp_path, "gemma3", text={"layer_types": ["full_attention"]}),),
             "text_config.layer_types", "1 entries for 48 layers")
    _refused((_config(tmp_path, "gpt_oss", layer_types=["sliding_attention"] * 3_000),),
             "layer_types", "3000 entries for 24 layers")


# --- 2. -o: whole or not at all ---------------------------------------------------------------------

def _tmp_left(folder: Path) -> list[str]:
    return [p.name for p in folder.iterdir() if p.name.endswith(".tmp")]


def test_a_file_size_limit_leaves_the_old_output_intact(tmp_path):
    """`ulimit -f` (or a full disk) left half a spec where the old file was."""
    out = tmp_path / "model.yaml"
    out.write_text("old: spec\n")
    limit = 300  # bytes: less than any spec plan import writes
    r = subprocess.run(PLAN + ["import", str(HF / "llama.json"), "-o", str(out)], check=False, capture_output=True,
                       text=True,
                       timeout=60, preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit)))
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("\n") == 1 and "cannot write: File too large" in r.stderr and "--output" in r.stderr
    assert out.read_text() == "old: spec\n" and _tmp_left(tmp_path) == []


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")
def test_dev_full_is_refused():
    _refused((HF / "llama.json", "-o", "/dev/full"), "/dev/full", "not a regular file")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only folder")
def test_a_read_only_folder_leaves_the_old_output_intact(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    out = folder / "model.yaml"
    out.write_text("old: spec\n")
    folder.chmod(0o555)
    try:
        _refused((HF / "llama.json", "-o", out), "cannot write: Permission denied")
    finally:
        folder.chmod(0o755)
    assert out.read_text() == "old: spec\n"


def test_a_symlink_at_the_output_is_refused_and_its_target_kept(tmp_path):
    target = tmp_path / "shared.yaml"
    target.write_text("shared: spec\n")
    link = tmp_path / "model.yaml"
    link.symlink_to(target)
    _refused((HF / "llama.json", "-o", link), "symbolic link")
    assert link.is_symlink() and target.read_text() == "shared: spec\n"


def test_the_input_is_never_the_output(tmp_path):
    config = tmp_path / "config.json"
    config.write_text((HF / "llama.json").read_text())
    before = config.read_text()
    _refused((config, "-o", config), "is the input", "refusing to overwrite it")
    hard = tmp_path / "same.yaml"
    os.link(config, hard)  # another name for the same file
    _refused((config, "-o", hard), "is the input")
    overlay = tmp_path / "overlay.yaml"
    overlay.write_text("training:\n  global_batch: 8\n")
    _refused((config, "--overlay", overlay, "-o", overlay), "is the input")
    assert config.read_text() == before and overlay.read_text() == "training:\n  global_batch: 8\n"


_WRITER = """
import sys
from pathlib import Path
from planner.atomic import write_atomic
out, mark = Path(sys.argv[1]), sys.argv[2]
text = f"name: {mark}\\n" + "# padding\\n" * 20000 + "end: true\\n"
for _ in range(40):
    write_atomic(out, text, "--output")
"""


def test_concurrent_writers_never_show_a_reader_an_empty_or_partial_file(tmp_path):
    """Six concurrent `plan import -o` left the file empty to a reader 7 times."""
    out = tmp_path / "model.yaml"
    out.write_text("name: old\nend: true\n")
    writers = [subprocess.Popen([sys.executable, "-c", _WRITER, str(out), f"w{i}"]) for i in range(6)]
    reads, seen = 0, set()
    while any(w.poll() is None for w in writers) or reads == 0:
        text = out.read_text()
        assert text.startswith("name: ") and text.endswith("end: true\n"), f"read {len(text)} characters"
        seen.add(text.split("\n", 1)[0])
        reads += 1
    assert all(w.wait(timeout=30) == 0 for w in writers)
    assert reads > 10 and len(seen) > 1 and _tmp_left(tmp_path) == []


def test_plan_import_replaces_an_existing_output_keeping_its_mode(tmp_path):
    out = tmp_path / "model.yaml"
    out.write_text("old: spec\n")
    out.chmod(0o640)
    code, text = _import(HF / "llama.json", "-o", out)
    assert code == 0, text
    assert yaml.safe_load(out.read_text())["name"] == "llama" and (out.stat().st_mode & 0o777) == 0o640
    assert _tmp_left(tmp_path) == []


# --- 3. exit 3 on valid-looking input -----------------------------------------------------------------

@pytest.mark.parametrize("fixture,keys,text,path", [
    ("qwen3_moe", {"decoder_sparse_step": 0}, None, "decoder_sparse_step"),
    ("deepseek_v3", {"moe_layer_freq": 0}, None, "moe_layer_freq"),
    ("llama4", {}, {"interleave_moe_layer_step": 0}, "text_config.interleave_moe_layer_step"),
    ("deepseek_v3", {"first_k_dense_replace": -1}, None, "first_k_dense_replace"),
])
def test_zero_steps_are_refused_naming_the_key(tmp_path, fixture, keys, text, path):
    _refused((_config(tmp_path, fixture, text=text, **keys),), f": {path}: ", "out of range")


def test_yarn_divisor_of_zero_is_refused(tmp_path):
    """factor e^10 with mscale_all_dim -1: 0.1 x -1 x ln factor + 1 = 0 (transformers divides by it too)."""
    scaling = {"type": "yarn", "factor": 22026.465794806718, "mscale": 1, "mscale_all_dim": -1}
    _refused((_config(tmp_path, "deepseek_v3", rope_scaling=scaling),), "rope_scaling.mscale_all_dim", "= 0")
    _refused((_config(tmp_path, "deepseek_v3", rope_scaling={**scaling, "mscale_all_dim": -3}),),
             "rope_scaling", "positive finite")


def test_deepseek_q_lora_rank_null_is_a_plain_query_projection(tmp_path):
    """transformers: q_lora_rank None builds q_proj directly (DeepSeek-V2-Lite); the spec's null says so."""
    out = tmp_path / "ds.yaml"
    code, text = _import(_config(tmp_path, "deepseek_v3", q_lora_rank=None), "-o", out)
    assert code == 0, text
    assert yaml.safe_load(out.read_text())["mla"]["q_lora_rank"] is None


@pytest.mark.parametrize("key", ["vocab_size", "unread_key"])
def test_a_5000_digit_integer_is_refused_naming_its_key_and_line(tmp_path, key):
    text = (HF / "llama.json").read_text().replace("{", '{\n  "unread_key": 1,', 1)
    config = tmp_path / "config.json"
    config.write_text(text.replace(f'"{key}": ', f'"{key}": 1{"0" * 5000}, "was_{key}": ', 1))
    line = next(i for i, t in enumerate(config.read_text().splitlines(), 1) if f'"{key}"' in t)
    _refused((config,), f"config.json:{line}: {key}: number too long (5001 characters)")


# --- 4. confident nonsense ----------------------------------------------------------------------------

@pytest.mark.parametrize("value", [[1, 2], "x", 3])
def test_gemma3_text_config_that_is_no_mapping_is_refused(tmp_path, value):
    _refused((_config(tmp_path, "gemma3", text_config=value),), "text_config: wrong type", "a mapping")


def test_llama4_empty_moe_layers_is_a_dense_model(tmp_path):
    """transformers: moe_layers [] (not None) makes every layer Llama4TextMLP(intermediate_size_mlp)."""
    out = tmp_path / "l4.yaml"
    code, text = _import(_config(tmp_path, "llama4", text={"moe_layers": []}), "-o", out)
    assert code == 0 and "MoE" not in text.splitlines()[-1], text
    spec = yaml.safe_load(out.read_text())
    assert "moe" not in spec and spec["ffn_hidden"] == 16384
    assert "text_config.moe_layers: no MoE layer left" in out.read_text()


def test_out_of_range_layer_indices_are_refused(tmp_path):
    _refused((_config(tmp_path, "llama4", text={"moe_layers": [1000, -5]}),),
             "text_config.moe_layers", "layer index 1000 is out of range", "0 to 47")
    _refused((_config(tmp_path, "qwen3_moe", mlp_only_layers=[48]),), "mlp_only_layers", "index 48")


@pytest.mark.parametrize("pattern", [0, -2, None])
def test_gemma3_sliding_window_pattern_must_be_positive(tmp_path, pattern):
    config = json.loads((HF / "gemma3.json").read_text())
    text = {k: v for k, v in config["text_config"].items() if k != "layer_types"}
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**config, "text_config": {**text, "sliding_window_pattern": pattern}}))
    _refused((path,), "text_config.sliding_window_pattern", "a positive integer")


# --- 5. messages ----------------------------------------------------------------------------------------

def test_a_long_model_type_is_cut(tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": "x" * 5000, "architectures": ["A" * 5000] * 10}))
    out = _refused((config,), "(5000 characters)", "(10 entries)")
    assert len(out) < 1000


def test_a_duplicate_key_is_named_with_its_lines(tmp_path):
    text = (HF / "llama.json").read_text()
    config = tmp_path / "config.json"
    config.write_text(text.replace('"vocab_size": 128256', '"vocab_size": 128256,\n  "vocab_size": 7', 1))
    first = next(i for i, t in enumerate(config.read_text().splitlines(), 1) if '"vocab_size"' in t)
    _refused((config,), f"config.json:{first + 1}: vocab_size: duplicate key 'vocab_size'",
             f"first at line {first}, again at line {first + 1}")


def test_a_file_name_that_is_not_utf8(tmp_path):
    """A non-UTF-8 name crashed `plan import` (UnicodeEncodeError): now it imports, named with U+FFFD."""
    folder = os.fsencode(tmp_path)
    config, out = folder + b"/bad\xff.json", folder + b"/out\xfe.yaml"
    try:
        with open(config, "wb") as f:
            f.write((HF / "llama.json").read_bytes())
    except OSError:
        pytest.skip("this file system refuses names that are not UTF-8")
    code, text = _import(Path(os.fsdecode(config)), "-o", Path(os.fsdecode(out)))
    assert code == 0, text
    with open(out, "rb") as f:
        written = f.read().decode("utf-8")
    assert yaml.safe_load(written)["name"] == "bad\ufffd" and "bad\\udcff.json" in written.split("\nname:")[0]  # the header, however a long path wraps it


def test_a_negative_max_position_embeddings_is_blamed_on_itself(tmp_path):
    """It was reported as seq_len at line 1, a key the config does not have."""
    config = _config(tmp_path, "llama", max_position_embeddings=-4096)
    line = next(i for i, t in enumerate(config.read_text().splitlines(), 1) if "max_position_embeddings" in t)
    _refused((config,), f"config.json:{line}: max_position_embeddings: got -4096")
