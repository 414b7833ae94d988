"""How megatron-layout.txt and megatron-bridge-checks.txt were extracted (issue 38, real frameworks: run by hand,
once, with the git clones under /work/.mirror/<owner>+<name>/repo; the tests read only the .txt files).

megatron-layout.txt: Megatron-LM's own pipeline-layout code, kept whole so tests/export/test_framework_checks.py
runs it as code: enums.py's LayerType, pipeline_parallel_layer_layout.py (the parser and validate_layer_layout) and
the pipeline statements of TransformerConfig.__post_init__ (the first/last-stage vs embedding/loss accounting check,
the layout and the uneven-split checks), at core_v0.15.0 (what --export megatron names) and at cd4afffa64 (the
Megatron-LM submodule of Megatron-Bridge v0.6.0). megatron-bridge-checks.txt: the lines of Megatron-Bridge v0.6.0 and
its Megatron-LM that the Bridge export must satisfy and that cannot run without torch, quoted with line numbers."""
import ast, subprocess, textwrap

MG, MB = "NVIDIA+Megatron-LM", "NVIDIA-NeMo+Megatron-Bridge"
MGT, MBT = "core_v0.15.0", "v0.6.0"


def show(repo, rev, path):
    return subprocess.run(["git", "-C", f"/work/.mirror/{repo}/repo", "show", f"{rev}:{path}"],
                          capture_output=True, text=True, check=True).stdout


def commit(repo, rev):
    return subprocess.run(["git", "-C", f"/work/.mirror/{repo}/repo", "rev-parse", f"{rev}^{{commit}}"],
                          capture_output=True, text=True, check=True).stdout.strip()


MBC = subprocess.run(["git", "-C", f"/work/.mirror/{MB}/repo", "ls-tree", MBT, "3rdparty/Megatron-LM"],
                     capture_output=True, text=True, check=True).stdout.split()[2]


def segment(src, node):
    """The statement's source lines, verbatim, dedented."""
    return textwrap.dedent("\n".join(src.splitlines()[node.lineno - 1:node.end_lineno]))


def pipeline_statements(src):
    """TransformerConfig.__post_init__'s statements from the first/last vs accounting check through the
    `if self.pipeline_model_parallel_layout is not None: ... elif (uneven) ... elif (accounting)` chain."""
    cls = next(n for n in ast.walk(ast.parse(src)) if isinstance(n, ast.ClassDef) and n.name == "TransformerConfig")
    post = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__post_init__")
    body = post.body
    k = next(i for i, n in enumerate(body) if isinstance(n, ast.If) and "account_for_embedding_in_pipeline_split"
             in ast.get_source_segment(src, n.test) and "num_layers_in_first_pipeline_stage" in ast.get_source_segment(src, n.test))
    assert "pipeline_model_parallel_layout is not None" in ast.get_source_segment(src, body[k + 1].test)
    return body[k], body[k + 1]


out = []
for rev in (MGT, MBC):
    enums = show(MG, rev, "megatron/core/transformer/enums.py")
    lt = next(n for n in ast.parse(enums).body if isinstance(n, ast.ClassDef) and n.name == "LayerType")
    layout = show(MG, rev, "megatron/core/transformer/pipeline_parallel_layer_layout.py")
    tc = show(MG, rev, "megatron/core/transformer/transformer_config.py")
    first, chain = pipeline_statements(tc)
    short = rev if rev.startswith("core_") else rev[:10]
    out += [f"## {short} megatron/core/transformer/enums.py:{lt.lineno}-{lt.end_lineno} LayerType", segment(enums, lt),
            f"## {short} megatron/core/transformer/pipeline_parallel_layer_layout.py (whole file)", layout.rstrip("\n"),
            f"## {short} megatron/core/transformer/transformer_config.py:{first.lineno}-{chain.end_lineno} "
            "TransformerConfig.__post_init__ pipeline statements",
            segment(tc, first) + "\n\n" + segment(tc, chain)]
licence = show(MG, MGT, "LICENSE").split("\n--\n")[0].strip()
head = f"""# Megatron-LM's pipeline-layout code, vendored to run the framework's own checks on --export megatron and
# --export megatron-bridge offline (tests/export/test_framework_checks.py runs it as code).
# repo: https://github.com/NVIDIA/Megatron-LM  tag: {MGT}  commit: {commit(MG, MGT)}
# and commit {MBC} (the 3rdparty/Megatron-LM submodule of NVIDIA-NeMo/Megatron-Bridge {MBT}).
# Per `## rev path[:lines] what` section, verbatim (a statement dedented): enums.py's LayerType,
# pipeline_parallel_layer_layout.py whole, and TransformerConfig.__post_init__'s pipeline statements (the
# first/last-stage vs embedding/loss accounting check, then the layout / uneven-split / accounting chain).
# Extracted by tests/data/frameworks/extract_checks.py. Licence (Megatron-LM's LICENSE, which applies to these files):
""" + "\n".join(("#   " + l.lstrip("# ")).rstrip() if l.strip() else "#" for l in licence.splitlines()) + "\n"
open("/work/main/tests/data/frameworks/megatron-layout.txt", "w").write(head + "\n".join(out) + "\n")


def quote(repo, rev, path, first_line, last_line=None, title=""):
    lines = show(repo, rev, path).splitlines()
    last_line = last_line or first_line
    who = "NVIDIA-NeMo/Megatron-Bridge " + rev if repo == MB else "NVIDIA/Megatron-LM " + (rev if rev.startswith("core_") else rev[:10])
    return [f"## {who} {path}:{first_line}-{last_line} {title}".rstrip(),
            textwrap.dedent("\n".join(lines[first_line - 1:last_line]))]


def find(repo, rev, path, text, start=1):
    lines = show(repo, rev, path).splitlines()
    return next(i + 1 for i, l in enumerate(lines) if i + 1 >= start and text in l)


cfg = "src/megatron/bridge/training/config.py"
opt = "megatron/core/optimizer/optimizer_config.py"
omc = "src/megatron/bridge/training/utils/omegaconf_utils.py"
amap = "src/megatron/bridge/utils/activation_map.py"
ds3 = "src/megatron/bridge/recipes/deepseek/h100/deepseek_v3.py"
l3 = "src/megatron/bridge/recipes/llama/h100/llama3.py"
fsdp = find(MB, MBT, cfg, "def _validate_and_apply_megatron_fsdp_configs")
ck = find(MB, MBT, cfg, 'assert self.checkpoint.ckpt_format == "fsdp_dtensor"', fsdp)
pa = find(MG, MBC, opt, "if self.use_precision_aware_optimizer:", find(MG, MBC, opt, "def __post_init__"))
fin = find(MB, MBT, cfg, 'if hasattr(self.optimizer, "finalize"):')
call = find(MB, MBT, cfg, "self._validate_and_apply_megatron_fsdp_configs()")
am = find(MB, MBT, amap, "ACTIVATION_FUNC_MAP: dict[str, Callable] = {")
am_end = find(MB, MBT, amap, "}", am)
ser = find(MB, MBT, omc, "_SERIALIZABLE_CALLABLE_FIELDS: frozenset[str]")
rest = find(MB, MBT, omc, "if key in _SERIALIZABLE_CALLABLE_FIELDS and isinstance(final_value, str):")
out = (quote(MB, MBT, cfg, fsdp, fsdp, "ConfigContainer: Megatron-FSDP's checks (ddp.use_megatron_fsdp)")
       + quote(MB, MBT, cfg, ck - 1, ck + 2, "the checkpoint format Megatron-FSDP requires (a recipe saves or loads)")
       + quote(MG, MBC, opt, pa, pa + 6, "OptimizerConfig.__post_init__, run by OptimizerConfig.finalize()")
       + quote(MB, MBT, cfg, fin, fin + 1, "ConfigContainer.validate: the optimizer is finalized ...")
       + quote(MB, MBT, cfg, call - 2, call, "... before Megatron-FSDP turns the distributed optimizer on")
       + quote(MB, MBT, ds3, find(MB, MBT, ds3, "cfg.optimizer.use_precision_aware_optimizer = True"), None,
               "deepseek_v3_pretrain_config: a shipped recipe with the precision-aware optimizer")
       + quote(MB, MBT, ds3, find(MB, MBT, ds3, "set_deepseek_v3_pipeline_model_parallel_layout(cfg.model)"), None,
               "deepseek_v3_pretrain_config: its pp 16 layout, set in the recipe (before any override)")
       + quote(MB, MBT, l3, find(MB, MBT, l3, "cfg.model.account_for_embedding_in_pipeline_split = True"),
               find(MB, MBT, l3, "cfg.model.account_for_embedding_in_pipeline_split = True") + 1,
               "a Llama 3 recipe with the embedding/loss accounting on")
       + quote(MB, MBT, amap, am, am_end, "activation names an override may give (short names)")
       + quote(MB, MBT, omc, ser, None, "activation_func is written and read as such a name")
       + quote(MB, MBT, omc, rest, rest + 3, "_apply_overrides: the name back to the callable"))
head = f"""# Megatron-Bridge checks that --export megatron-bridge must pass and that need torch to run, quoted to re-implement
# them exactly in tests/export/test_framework_checks.py.
# repo: https://github.com/NVIDIA-NeMo/Megatron-Bridge  tag: {MBT}  commit: {commit(MB, MBT)}  licence: Apache-2.0
# and its 3rdparty/Megatron-LM submodule https://github.com/NVIDIA/Megatron-LM commit {MBC} (BSD-3-Clause).
# Per `## repo rev path:first-last what` section, the lines verbatim (dedented). Extracted by extract_checks.py.
"""
open("/work/main/tests/data/frameworks/megatron-bridge-checks.txt", "w").write(head + "\n".join(out) + "\n")
