"""NeMo's TP-communication overlap where the Megatron export writes --tp-comm-overlap (issue 30 item 3).
Names from tests/data/frameworks/nemo.txt (NVIDIA/NeMo v2.4.0 megatron_comm_overlap.py, recipes/gpt3_175b.py) and
nemo-run.txt (NVIDIA/NeMo-Run v0.4.0 cli_parser.py)."""
import re
import shlex
from pathlib import Path

from planner.estimate import estimate_layout
from planner.export import export_settings
from planner.export.nemo import TP_OVERLAP_CALLBACK
from planner.specs.loading import load_cluster, load_model

DATA = Path(__file__).parents[1] / "data" / "frameworks"
WORD = f"trainer.callbacks+=[{TP_OVERLAP_CALLBACK}(tp_comm_overlap=True)]"  # what NeMo-Run receives
LINE = shlex.quote(WORD)  # as printed: one shell word


def _words(text: str) -> list[str]:
    """The overrides as the shell hands them over, one per line."""
    return [w for line in text.splitlines() if not line.startswith("#") for w in shlex.split(line)]


def _export(kind, overlap=True, **layout):
    model = load_model("gpt3-175b")  # a stack with tp_comm_overlap (megatron-core) or without it
    model = model.model_copy(update={"training": model.training.model_copy(update={"tp_comm_overlap": overlap})})
    cluster = load_cluster("dgx-a100-1024")
    scored = estimate_layout(model, cluster, **dict(pp=8, micro_batch=1, zero=1) | layout)
    return export_settings(kind, scored, model, cluster)


def _vendored(name: str) -> list[str]:
    return (DATA / name).read_text().splitlines()


def test_stack_profiles_differ_in_tp_overlap():
    stacks = Path(__file__).parents[2] / "configs" / "stacks"
    assert "tp_comm_overlap: true" in (stacks / "megatron-core.yaml").read_text()
    assert "tp_comm_overlap: false" in (stacks / "megatron-lm-2022.yaml").read_text()


def test_overlap_line_where_megatron_has_its_flag():
    nemo = _export("nemo", tp=4, sequence_parallel=True).text.splitlines()
    megatron = _export("megatron", tp=4, sequence_parallel=True).text
    assert "--tp-comm-overlap \\" in megatron.splitlines() or megatron.rstrip().endswith("--tp-comm-overlap")
    assert LINE in nemo and WORD in _words("\n".join(nemo))
    assert sum("MegatronCommOverlapCallback" in l for l in nemo if not l.startswith("#")) == 1


def test_no_overlap_line_with_tp_1_without_sp_or_on_a_stack_without_it():
    for kind_layout in (dict(tp=1), dict(tp=4, sequence_parallel=False)):
        text = _export("nemo", **kind_layout).text
        assert not any(w.startswith("trainer.callbacks") for w in _words(text)), kind_layout
        megatron = _export("megatron", **kind_layout).text.splitlines()
        assert not any("--tp-comm-overlap" in l for l in megatron if not l.startswith("#"))
    # tp 4 without sequence parallelism: said, as the callback would drop it (megatron_comm_overlap.py)
    assert any("needs sequence parallelism" in n for n in _export("nemo", tp=4, sequence_parallel=False).notes)
    assert not any("MegatronCommOverlapCallback" in n for n in _export("nemo", tp=1).notes)
    old = _export("nemo", overlap=False, tp=4, sequence_parallel=True).text
    assert not any(w.startswith("trainer.callbacks") for w in _words(old))


def test_overlap_names_are_vendored():
    nemo = _vendored("nemo.txt")
    section = f"## section: trainer.callbacks+={TP_OVERLAP_CALLBACK}"
    k = nemo.index(section)
    params = [l for l in nemo[k + 2:k + 14]]
    assert "tp_comm_overlap: bool = None," in params
    # the module path of the class is the file the section names
    path = TP_OVERLAP_CALLBACK.rsplit(".", 1)[0].replace(".", "/") + ".py"
    assert nemo[k + 1] == f"## from: NVIDIA/NeMo v2.4.0 {path}, MegatronCommOverlapCallback.__init__ parameters"
    # the callback keeps the overlap only with tp >= 2 and sequence parallelism: the export's condition
    assert "if parallelism_cfg.tensor_model_parallel_size < 2:" in nemo
    assert "elif not parallelism_cfg.sequence_parallel:" in nemo
    # the recipe's callbacks are a list (what `+=` extends), and NeMo-Run parses `+=` and a dotted factory
    assert "callbacks=[run.Config(TimingCallback)]," in nemo
    run = _vendored("nemo-run.txt")
    assert 'ADD = "+="' in run and 'if "." in factory_name:' in run and "return fdl.build(partial_factory)()" in run
    # NeMo-Run's assignment regex (cli_parser.py parse) reads the line's key and operation
    key = re.match(r"^([\w\[\]\.]+)\s*(=|\+=)", WORD)
    assert key.groups() == ("trainer.callbacks", "+=")


def _shell_words(text: str) -> list[str]:
    """The words a shell reads from an export: comments dropped, backslash-newline a continuation."""
    return shlex.split("\n".join(l for l in text.splitlines() if not l.startswith("#")).replace("\\\n", " "))


def test_megatron_fsdp_with_tp_before_blackwell_exports_no_tp_overlap():
    # ZeRO-2 is Megatron FSDP, which asserts CUDA_DEVICE_MAX_CONNECTIONS != 1, while TP overlap on an A100
    # (sm 80) wants 1 (Megatron-LM arguments.py core_v0.15.0 650-651, 934-947): no overlap flag in any of the
    # three Megatron exports, and said; ZeRO-1 (the distributed optimizer) keeps it
    for kind in ("megatron", "nemo", "megatron-bridge"):
        fsdp = _export(kind, tp=4, sequence_parallel=True, zero=2)
        words = _shell_words(fsdp.text)
        assert "--tp-comm-overlap" not in words and not any("tp_comm_overlap=true" in w.lower() for w in words), kind
        assert any("no TP communication overlap" in n for n in fsdp.notes), kind
        # the control: at ZeRO-1 (the distributed optimizer) each export has its overlap word
        zero1 = _shell_words(_export(kind, tp=4, sequence_parallel=True, zero=1).text)
        assert "--tp-comm-overlap" in zero1 or any("tp_comm_overlap=true" in w.lower() for w in zero1), kind
    # Bridge says false, so that a recipe's true does not stand
    assert "model.tp_comm_overlap=false" in _shell_words(_export("megatron-bridge", tp=4, sequence_parallel=True, zero=2).text)
