"""How tests/data/frameworks/*.txt were extracted (run by hand, once, with git clones of the
repositories under /work/.mirror/<owner>+<name>/repo; the tests read only the .txt files)."""
import ast, re, subprocess

TT_WHEEL = "/tmp/tt030/wheel"  # torchtitan 0.3.0 (no v0.3.0 tag in the fetched history): the PyPI wheel, unpacked by
# pip download torchtitan==0.3.0 --no-deps -d /tmp/tt030 && unzip /tmp/tt030/*.whl -d /tmp/tt030/wheel
# (torchtitan-0.3.0-py3-none-any.whl, sha256 5563ccf9a295b24e00a36087149e9c2d0686cecbd3972c31e67227029293af42)

def show(repo, rev, path):
    if repo == "pytorch+torchtitan" and rev == "v0.3.0":
        return open(f"{TT_WHEEL}/{path}").read()
    return subprocess.run(["git", "-C", f"/work/.mirror/{repo}/repo", "show", f"{rev}:{path}"],
                          capture_output=True, text=True, check=True).stdout

def commit(repo, rev):
    return subprocess.run(["git", "-C", f"/work/.mirror/{repo}/repo", "rev-parse", f"{rev}^{{commit}}"],
                          capture_output=True, text=True, check=True).stdout.strip()

def lines_of(src, a, b):
    return src.splitlines()[a - 1:b]

# ---- Megatron-LM
MG = "NVIDIA+Megatron-LM"; MGT = "core_v0.15.0"
src = show(MG, MGT, "megatron/training/arguments.py")
lines = src.splitlines()
out = []
for node in sorted((n for n in ast.walk(ast.parse(src)) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                    and n.func.attr == "add_argument"), key=lambda n: n.lineno):
    first = node.args[0]
    out.extend(l.strip() for l in lines[node.lineno - 1:first.end_lineno])
    for kw in node.keywords:
        if kw.arg == "choices":
            out.extend("    " + l.strip() for l in lines[kw.lineno - 1:kw.end_lineno])
head = f"""# Megatron-LM command-line flags, vendored to check planner/export.py's names offline.
# repo: https://github.com/NVIDIA/Megatron-LM  tag: {MGT}  commit: {commit(MG, MGT)}
# file: megatron/training/arguments.py   licence: BSD-3-Clause (NVIDIA), see the repository's LICENSE
# extracted with Python's ast: for every `*.add_argument(...)` call, its source lines up to the end of
# its first argument (the flag), verbatim but stripped of indentation, then, indented, the verbatim
# lines of its `choices=` keyword when it has one. Nothing else of the file is kept.
"""
open("/work/main/tests/data/frameworks/megatron-lm.txt", "w").write(head + "\n".join(out) + "\n")

# ---- Megatron Core fields used by NeMo (model.config.*, trainer.strategy.ddp.*, optim.config.*)
def dataclass_fields(src, cls):
    tree = ast.parse(src)
    node = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == cls)
    ls = src.splitlines()
    return [ls[s.lineno - 1].strip() for s in node.body if isinstance(s, ast.AnnAssign)]

def init_params(src, cls, method="__init__"):
    tree = ast.parse(src)
    node = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == cls)
    fn = next(n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == method)
    ls = src.splitlines()
    return [ls[a.lineno - 1].strip() for a in fn.args.args[1:] + fn.args.kwonlyargs]

core = {
    "model.config": ("megatron/core/transformer/transformer_config.py", "TransformerConfig"),
    "trainer.strategy.ddp": ("megatron/core/distributed/distributed_data_parallel_config.py", "DistributedDataParallelConfig"),
    "optim.config": ("megatron/core/optimizer/optimizer_config.py", "OptimizerConfig"),
}
NM = "NVIDIA+NeMo"; NMT = "v2.4.0"
nemo = {
    "trainer.strategy": ("nemo/lightning/pytorch/strategies/megatron_strategy.py", "MegatronStrategy", "init"),
    "trainer.plugins": ("nemo/lightning/pytorch/plugins/mixed_precision.py", "MegatronMixedPrecision", "init"),
    "data": ("nemo/collections/llm/gpt/data/mock.py", "MockDataModule", "init"),
    "model.config": ("nemo/collections/llm/gpt/model/base.py", "GPTConfig", "fields"),
}
sec = []
for prefix, (path, cls, how) in nemo.items():
    s = show(NM, NMT, path)
    got = init_params(s, cls) if how == "init" else dataclass_fields(s, cls)
    sec.append(f"## section: {prefix}\n## from: NVIDIA/NeMo {NMT} {path}, {cls}" + (".__init__ parameters" if how == "init" else " fields"))
    sec.extend(got)
rec = show(NM, NMT, "nemo/collections/llm/recipes/gpt3_175b.py")
sec.append(f"## section: trainer\n## from: NVIDIA/NeMo {NMT} nemo/collections/llm/recipes/gpt3_175b.py, the nl.Trainer config of trainer()")
sec.extend(l.strip() for l in rec.splitlines() if re.match(r"\s+(devices|num_nodes)=", l))
for prefix, (path, cls) in core.items():
    s = show(MG, MGT, path)
    sec.append(f"## section: {prefix}\n## from: NVIDIA/Megatron-LM {MGT} {path}, {cls} fields")
    sec.extend(dataclass_fields(s, cls))
head = f"""# NeMo 2 recipe override paths, vendored to check planner/export.py's names offline.
# repo: https://github.com/NVIDIA/NeMo  tag: {NMT}  commit: {commit(NM, NMT)}  licence: Apache-2.0
# NeMo {NMT} leaves megatron_core unpinned (requirements/requirements_nlp.txt); the Megatron Core
# dataclasses below are from https://github.com/NVIDIA/Megatron-LM tag {MGT} commit {commit(MG, MGT)}
# (BSD-3-Clause). The gpt3_175b recipe builds trainer.strategy as run.Config(nl.MegatronStrategy, ...,
# ddp=run.Config(DistributedDataParallelConfig, ...)), trainer.plugins as bf16_mixed() (a
# MegatronMixedPrecision config), data as run.Config(MockDataModule, ...), model as GPTModel(config=
# GPTConfig175B) and optim's config as run.Config(OptimizerConfig, ...) (recipes/optim/adam.py).
# Extracted with Python's ast: each section is an override prefix, then the verbatim source line of
# each parameter of the named __init__ (or each annotated field of the named dataclass), indentation
# stripped; the trainer section is the recipe's `devices=`/`num_nodes=` lines.
"""
open("/work/main/tests/data/frameworks/nemo.txt", "w").write(head + "\n".join(sec) + "\n")

# ---- torchtitan
TT = "pytorch+torchtitan"; TTT = "v0.2.2"
s = show(TT, TTT, "torchtitan/config/job_config.py")
tree = ast.parse(s); ls = s.splitlines(); out = []
for n in tree.body:
    if isinstance(n, ast.ClassDef):
        out.append(ls[n.lineno - 1])
        out.extend(ls[f.lineno - 1:f.end_lineno] and ls[f.lineno - 1] for f in n.body if isinstance(f, ast.AnnAssign))
sched = [l for l in ls if "Interleaved1F1B" in l]
conv = []
for p in ("torchtitan/components/quantization/float8.py", "torchtitan/components/quantization/mx.py"):
    conv += [l for l in show(TT, TTT, p).splitlines() if l.startswith("register_model_converter(")]
head = f"""# torchtitan command-line overrides, vendored to check planner/export.py's names offline.
# repo: https://github.com/pytorch/torchtitan  tag: {TTT}  commit: {commit(TT, TTT)}  licence: BSD-3-Clause
# file: torchtitan/config/job_config.py: every top-level `class` line and the verbatim line of each of
# its annotated fields (extracted with Python's ast; a CLI override is --<JobConfig field>.<field>...,
# torchtitan/config/manager.py); then the job_config.py lines that name the Interleaved1F1B schedule;
# then the `register_model_converter(` lines of torchtitan/components/quantization/float8.py and mx.py
# (the names --model.converters takes).
"""
open("/work/main/tests/data/frameworks/torchtitan.txt", "w").write(
    head + "\n".join(out) + "\n## schedules\n" + "\n".join(sched) + "\n## converters\n" + "\n".join(conv) + "\n")

# ---- DeepSpeed
DS = "deepspeedai+DeepSpeed"; DST = "v0.19.5"
sec = []
for path, prefix in (("deepspeed/runtime/constants.py", ""), ("deepspeed/runtime/precision_config.py", ""),
                     ("deepspeed/runtime/activation_checkpointing/config.py", "activation_checkpointing"),
                     ("deepspeed/runtime/zero/config.py", "zero_optimization")):
    t = show(DS, DST, path)
    sec.append(f"## file: {path}")
    sec.extend(l for l in t.splitlines() if re.match(r"^[A-Z0-9_]+ = ['\"][a-z0-9_]+['\"]\s*(#.*)?$", l))
    if path.endswith("zero/config.py"):
        sec.append("## DeepSpeedZeroConfig fields")
        sec.extend(dataclass_fields(t, "DeepSpeedZeroConfig"))
        tree = ast.parse(t); tl = t.splitlines()
        enum = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == "ZeroStageEnum")
        sec.append("## ZeroStageEnum (the values of zero_optimization.stage)")
        sec.extend(tl[n.lineno - 1].strip() for n in enum.body if isinstance(n, ast.Assign))
head = f"""# DeepSpeed config keys, vendored to check planner/export.py's names offline.
# repo: https://github.com/deepspeedai/DeepSpeed  tag: {DST}  commit: {commit(DS, DST)}  licence: Apache-2.0
# For each file: its module-level string constants (`NAME = "key"` lines, verbatim, found with the regex
# ^[A-Z0-9_]+ = ['"][a-z0-9_]+['"]); for deepspeed/runtime/zero/config.py also the verbatim line of each
# annotated field of DeepSpeedZeroConfig (Python's ast), the keys of "zero_optimization".
"""
open("/work/main/tests/data/frameworks/deepspeed.txt", "w").write(head + "\n".join(sec) + "\n")

# ---- NeMo-Run (the CLI that reads the nemo overrides; NeMo v2.4.0 requirements/requirements_run.txt leaves
# nemo_run unpinned): the types its TypeParser can parse an override's value into
NR = "NVIDIA+NeMo-Run"; NRT = "v0.4.0"
src = show(NR, NRT, "nemo_run/cli/cli_parser.py")
init = next(n for n in ast.walk(ast.parse(src)) if isinstance(n, ast.FunctionDef) and n.name == "__init__"
            and any(isinstance(t, ast.Attribute) and t.attr == "parsers" for s in n.body if isinstance(s, ast.Assign) for t in s.targets))
table = next(s for s in init.body if isinstance(s, ast.Assign) and s.targets[0].attr == "parsers")
head = f"""# NeMo-Run's CLI value parsers, vendored to check which NeMo override values it can parse offline.
# repo: https://github.com/NVIDIA/NeMo-Run  tag: {NRT}  commit: {commit(NR, NRT)}  licence: Apache-2.0
# NeMo v2.4.0 leaves nemo_run unpinned (requirements/requirements_run.txt). Extracted with Python's ast:
# the verbatim lines of TypeParser.__init__'s `self.parsers = {{...}}` (annotation origin -> parser),
# indentation stripped; an origin missing here (e.g. tuple) raises UnknownTypeError in strict mode.
## from: NVIDIA/NeMo-Run {NRT} nemo_run/cli/cli_parser.py, TypeParser.__init__
"""
open("/work/main/tests/data/frameworks/nemo-run.txt", "w").write(
    head + "\n".join(l.strip() for l in lines_of(src, table.lineno, table.end_lineno)) + "\n")

# ---- Megatron-LM's argument parser, rebuildable offline (tests/export/test_roundtrip.py)
def argparse_calls(src):
    """Every `*.add_argument(...)` call of a source, as one line of Python with its help= dropped."""
    out = []
    for node in sorted((n for n in ast.walk(ast.parse(src)) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                        and n.func.attr == "add_argument"), key=lambda n: n.lineno):
        node.keywords = [k for k in node.keywords if k.arg != "help"]
        node.func = ast.Attribute(value=ast.Name("group"), attr="add_argument")
        out.append(ast.unparse(node))
    return out

src = show(MG, MGT, "megatron/training/arguments.py")
tc = show(MG, MGT, "megatron/core/transformer/transformer_config.py")
mla = dataclass_fields(tc, "MLATransformerConfig")
head = f"""# Megatron-LM's command-line parser, vendored to parse the planner's --export megatron offline.
# repo: https://github.com/NVIDIA/Megatron-LM  tag: {MGT}  commit: {commit(MG, MGT)}
# licence: BSD-3-Clause (NVIDIA), see the repository's LICENSE
# file: megatron/training/arguments.py: every `*.add_argument(...)` call (Python's ast, in source order), one per
# line as ast.unparse writes it, its help= keyword dropped and its receiver renamed `group`; arguments.py builds
# them on argparse.ArgumentParser(allow_abbrev=False). Then `## MLATransformerConfig fields`: the verbatim line of
# each annotated field of megatron/core/transformer/transformer_config.py MLATransformerConfig (the YaRN
# settings arguments.py has no flag for). Then `## type functions (verbatim)`: arguments.py's _eval_pattern, moe_freq_type and
# tuple_type, the type= of --moe-layer-freq, --window-attn-skip-freq and --window-size.
"""
open("/work/main/tests/data/frameworks/megatron-lm-argparse.txt", "w").write(
    head + "\n".join(argparse_calls(src)) + "\n## MLATransformerConfig fields\n" + "\n".join(mla)
    + "\n## type functions (verbatim)\n" + "\n".join(ast.get_source_segment(src, n) for n in ast.parse(src).body
                                                      if isinstance(n, ast.FunctionDef) and n.name in ("_eval_pattern", "moe_freq_type", "tuple_type")) + "\n")

# ---- torchtitan main (issue 30 item 3): the config dataclasses its CLI (tyro over Trainer.Config) reads
TTM = "b5bcd76c66d0acb1a08b176d9639425bc55e0b2a"  # main, 2026-08-21
def class_fields(src, cls_path):
    """Verbatim first line of each annotated field of a (nested) class, e.g. "Trainer.Config"."""
    body = ast.parse(src).body
    for name in cls_path.split("."):
        node = next(n for n in body if isinstance(n, ast.ClassDef) and n.name == name)
        body = node.body
    ls = src.splitlines()
    return [ls[f.lineno - 1] for f in body if isinstance(f, ast.AnnAssign)]

tr = show(TT, TTM, "torchtitan/trainer.py")
cf = show(TT, TTM, "torchtitan/config/configs.py")
ac = show(TT, TTM, "torchtitan/distributed/activation_checkpoint.py")
out = ["class Trainer.Config:"] + class_fields(tr, "Trainer.Config")
for cls in ("TrainingConfig", "ParallelismConfig", "CompileConfig", "CommConfig", "DebugConfig"):
    out += [f"class {cls}:"] + class_fields(cf, cls)
acn = next(n for n in ast.parse(ac).body if isinstance(n, ast.Assign) and n.targets[0].id == "ActivationCheckpointingConfig")
head = f"""# torchtitan command-line overrides at main, vendored to check --export torchtitan offline.
# repo: https://github.com/pytorch/torchtitan  rev: main  commit: {TTM} (2026-08-21)  licence: BSD-3-Clause
# torchtitan/config/manager.py parses the CLI with tyro.cli(type(config)), config a Trainer.Config; a flag is
# --<Trainer.Config field>.<field>. Kept: the verbatim first line of each annotated field of Trainer.Config
# (torchtitan/trainer.py) and of TrainingConfig, ParallelismConfig, CompileConfig, CommConfig and DebugConfig
# (torchtitan/config/configs.py), each after a `class` line (Python's ast); then the verbatim
# ActivationCheckpointingConfig union of torchtitan/distributed/activation_checkpoint.py (its tyro subcommands);
# then the configs.py lines that name the Interleaved1F1B schedule.
"""
open("/work/main/tests/data/frameworks/torchtitan-main.txt", "w").write(
    head + "\n".join(out) + "\n## activation checkpoint subcommands\n"
    + "\n".join(ac.splitlines()[acn.lineno - 1:acn.end_lineno]) + "\n## schedules\n"
    + "\n".join(l for l in cf.splitlines() if "Interleaved1F1B" in l) + "\n")

# ---- torchtitan 0.3.0, the release on PyPI (issue 38): the same fields, from the wheel (TT_WHEEL above)
TTR = "v0.3.0"
tr, cf, ac = (show(TT, TTR, f"torchtitan/{f}") for f in ("trainer.py", "config/configs.py", "distributed/activation_checkpoint.py"))
out = ["class Trainer.Config:"] + class_fields(tr, "Trainer.Config")
for cls in ("TrainingConfig", "ParallelismConfig", "CompileConfig", "CommConfig", "DebugConfig"):
    out += [f"class {cls}:"] + class_fields(cf, cls)
acn = next(n for n in ast.parse(ac).body if isinstance(n, ast.Assign) and n.targets[0].id == "ActivationCheckpointingConfig")
head = f"""# torchtitan command-line overrides of the release 0.3.0, vendored to check --export torchtitan offline.
# package: https://pypi.org/project/torchtitan/0.3.0/ (torchtitan-0.3.0-py3-none-any.whl, sha256 5563ccf9a295...;
# the repository https://github.com/pytorch/torchtitan as fetched has no v0.3.0 tag)  licence: BSD-3-Clause
# torchtitan/config/manager.py parses the CLI with tyro.cli(type(config)), config a Trainer.Config; a flag is
# --<Trainer.Config field>.<field>. Kept, as for main (torchtitan-main.txt): the verbatim first line of each annotated
# field of Trainer.Config (torchtitan/trainer.py) and of TrainingConfig, ParallelismConfig, CompileConfig, CommConfig
# and DebugConfig (torchtitan/config/configs.py), each after a `class` line (Python's ast); then the verbatim
# ActivationCheckpointingConfig union of torchtitan/distributed/activation_checkpoint.py (its tyro subcommands);
# then the configs.py lines that name the Interleaved1F1B schedule.
"""
open("/work/main/tests/data/frameworks/torchtitan-0.3.txt", "w").write(
    head + "\n".join(out) + "\n## activation checkpoint subcommands\n"
    + "\n".join(ac.splitlines()[acn.lineno - 1:acn.end_lineno]) + "\n## schedules\n"
    + "\n".join(l for l in cf.splitlines() if "Interleaved1F1B" in l) + "\n")

# ---- DeepSpeed config classes (issue 30 item 1: a ds_config read back as DeepSpeedConfig reads it)
cfg_py = show(DS, DST, "deepspeed/runtime/config.py")
prec = show(DS, DST, "deepspeed/runtime/precision_config.py")
utils = show(DS, DST, "deepspeed/runtime/config_utils.py")
act = show(DS, DST, "deepspeed/runtime/activation_checkpointing/config.py")
tree = ast.parse(cfg_py)
fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "get_communication_data_type")
cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "DeepSpeedConfig")
batch = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "_batch_assertion")
model = next(n for n in ast.walk(ast.parse(utils)) if isinstance(n, ast.ClassDef) and n.name == "DeepSpeedConfigModel")
mc = next(n for n in model.body if isinstance(n, ast.Assign) and n.targets[0].id == "model_config")
zc = show(DS, DST, "deepspeed/runtime/zero/config.py")
both = cfg_py + prec + act + zc
reads = sorted(set(re.findall(r"get_scalar_param\(\s*param_dict,\s*([A-Z0-9_]+)", both))
               | set(re.findall(r"param_dict\.get\(\s*([A-Z0-9_]+)", both)) | set(re.findall(r"param_dict\[([A-Z0-9_]+)\]", both))
               | set(re.findall(r"([A-Z0-9_]+) in param_dict", both)) | set(re.findall(r"comm_type=([A-Z0-9_]+)", both)))
head = f"""# DeepSpeed's config classes, vendored to read a ds_config back offline (tests/export/test_roundtrip.py).
# repo: https://github.com/deepspeedai/DeepSpeed  tag: {DST}  commit: {commit(DS, DST)}  licence: Apache-2.0
# Sections: the constant names deepspeed/runtime/config.py, precision_config.py, activation_checkpointing/config.py
# and zero/config.py read from the top-level dict (regexes get_scalar_param(param_dict, NAME / param_dict.get(NAME /
# param_dict[NAME] / NAME in param_dict / comm_type=NAME; their strings are in deepspeed.txt); config_utils.py DeepSpeedConfigModel's model_config (verbatim); the verbatim line of each annotated
# field of precision_config.py DeepSpeedBF16Config and DeepSpeedFP16Config (Python's ast); the single-line
# `ACT_CHKPT_*_DEFAULT = ` lines of activation_checkpointing/config.py; then config.py's get_communication_data_type
# and DeepSpeedConfig._batch_assertion, verbatim (ast.get_source_segment, the method dedented).
"""
open("/work/main/tests/data/frameworks/deepspeed-config.txt", "w").write(
    head + "## top-level keys read (constant names)\n" + "\n".join(reads)
    + "\n## DeepSpeedConfigModel model_config\n" + ast.get_source_segment(utils, mc).strip()
    + "\n## DeepSpeedBF16Config fields\n" + "\n".join(dataclass_fields(prec, "DeepSpeedBF16Config"))
    + "\n## DeepSpeedFP16Config fields\n" + "\n".join(dataclass_fields(prec, "DeepSpeedFP16Config"))
    + "\n## activation checkpointing defaults\n" + "\n".join(l for l in act.splitlines() if re.match(r"^ACT_CHKPT_\w+_DEFAULT = [^{]*$", l))
    + "\n## functions (verbatim)\n" + ast.get_source_segment(cfg_py, fn) + "\n\n\n"
    + "\n".join(l[4:] for l in ast.get_source_segment(cfg_py, batch, padded=True).splitlines()) + "\n")

# ---- Megatron-Bridge (issue 30 item 3): ConfigContainer override paths, recipes, mixed-precision recipe names
MB = "NVIDIA-NeMo+Megatron-Bridge"; MBT = "v0.6.0"
MBC = subprocess.run(["git", "-C", f"/work/.mirror/{MB}/repo", "ls-tree", MBT, "3rdparty/Megatron-LM"],
                     capture_output=True, text=True, check=True).stdout.split()[2]  # the Megatron-LM it builds on
bcfg = show(MB, MBT, "src/megatron/bridge/training/config.py")
sections = {
    "ConfigContainer": [("bridge", "src/megatron/bridge/training/config.py", "ConfigContainer")],
    "model": [("bridge", "src/megatron/bridge/models/gpt_provider.py", "GPTModelProvider"),
              ("mcore", "megatron/core/transformer/transformer_config.py", "TransformerConfig"),
              ("mcore", "megatron/core/model_parallel_config.py", "ModelParallelConfig")],
    "train": [("bridge", "src/megatron/bridge/training/config.py", "TrainingConfig"),
              ("mcore", "megatron/training/config/training_config.py", "TrainingConfig")],
    "ddp": [("bridge", "src/megatron/bridge/training/config.py", "DistributedDataParallelConfig"),
            ("mcore", "megatron/core/distributed/distributed_data_parallel_config.py", "DistributedDataParallelConfig")],
    "optimizer": [("bridge", "src/megatron/bridge/training/config.py", "OptimizerConfig"),
                  ("mcore", "megatron/core/optimizer/optimizer_config.py", "OptimizerConfig")],
    "dataset": [("bridge", "src/megatron/bridge/training/config.py", "GPTDatasetConfig")],
    "checkpoint": [("bridge", "src/megatron/bridge/training/config.py", "CheckpointConfig"),
                   ("mcore", "megatron/training/config/training_config.py", "CheckpointConfig")],
}
out = []
for prefix, sources in sections.items():
    out.append(f"## section: {prefix}")
    for where, path, cls in sources:
        out.append(f"## from: {'NVIDIA-NeMo/Megatron-Bridge ' + MBT if where == 'bridge' else 'NVIDIA/Megatron-LM ' + MBC[:10]} {path}, {cls} fields")
        out.extend(dataclass_fields(show(MB, MBT, path) if where == "bridge" else show(MG, MBC, path), cls))
inits = subprocess.run(["git", "-C", f"/work/.mirror/{MB}/repo", "ls-tree", "-r", "--name-only", MBT, "src/megatron/bridge/recipes"],
                       capture_output=True, text=True, check=True).stdout.split()
recipes = sorted({name for p in inits if p.endswith("__init__.py")
                  for name in re.findall(r"\b([a-z0-9_]+_pretrain_config)\b", show(MB, MBT, p))})
mp = show(MB, MBT, "src/megatron/bridge/training/mixed_precision.py")
mixed = re.findall(r"^@register\ndef (\w+)\(", mp, re.M)
head = f"""# Megatron-Bridge ConfigContainer override paths, vendored to check --export megatron-bridge offline.
# repo: https://github.com/NVIDIA-NeMo/Megatron-Bridge  tag: {MBT}  commit: {commit(MB, MBT)}  licence: Apache-2.0
# Megatron Core and megatron.training dataclasses from its 3rdparty/Megatron-LM submodule: https://github.com/NVIDIA/Megatron-LM
# commit {MBC} (BSD-3-Clause). scripts/training/run_recipe.py applies trailing KEY=VALUE overrides to the
# ConfigContainer a recipe function returns (--recipe NAME). Each `## section: P` is an override prefix, then, per
# `## from:` class, the verbatim line of each annotated field (Python's ast; a subclass's fields first, then its
# base's). `## recipes`: the *_pretrain_config names src/megatron/bridge/recipes/*/__init__.py export. `## mixed
# precision`: the @register'ed recipe names of src/megatron/bridge/training/mixed_precision.py (ConfigContainer
# .mixed_precision takes one by name).
"""
open("/work/main/tests/data/frameworks/megatron-bridge.txt", "w").write(
    head + "\n".join(out) + "\n## recipes\n" + "\n".join(recipes) + "\n## mixed precision\n" + "\n".join(mixed) + "\n")

# ---- NeMo TP communication overlap (issue 30 item 3): NeMo 2 turns it on only through MegatronCommOverlapCallback
# (it sets model.config.tp_comm_overlap and initialises Transformer Engine's userbuffers); the export appends one to
# trainer.callbacks with NeMo-Run's `+=` and its dotted-import factory. Run after the nemo.txt and nemo-run.txt blocks.
mco = "nemo/lightning/pytorch/callbacks/megatron_comm_overlap.py"
s = show(NM, NMT, mco)
rec = show(NM, NMT, "nemo/collections/llm/recipes/gpt3_175b.py")
add = [f"## section: trainer.callbacks+=nemo.lightning.pytorch.callbacks.megatron_comm_overlap.MegatronCommOverlapCallback",
       f"## from: NVIDIA/NeMo {NMT} {mco}, MegatronCommOverlapCallback.__init__ parameters"] + init_params(s, "MegatronCommOverlapCallback")
add += [f"## from: NVIDIA/NeMo {NMT} {mco}, _get_model_comm_overlap_cfgs: the conditions it keeps tp_comm_overlap under"]
add += [l.strip() for l in s.splitlines() if re.match(r"\s+(if|elif) .*(tensor_model_parallel_size < 2|sequence_parallel|HAVE_TE):", l)]
add += [f"## from: NVIDIA/NeMo {NMT} nemo/collections/llm/recipes/gpt3_175b.py, pretrain_recipe's trainer callbacks (a list `+=` extends)"]
add += [l.strip() for l in rec.splitlines() if "callbacks=[run.Config(TimingCallback)]" in l]
path = "/work/main/tests/data/frameworks/nemo.txt"
ls = open(path).read().splitlines()
k = next(i for i, l in enumerate(ls) if not l.startswith("# "))
note = (f"# Added for the TP-communication overlap: `## section: trainer.callbacks+=<class>`, the verbatim {mco} lines of\n"
        f"# MegatronCommOverlapCallback.__init__'s parameters and of the `if`/`elif` lines that keep tp_comm_overlap, and\n"
        f"# gpt3_175b.py's trainer callbacks line (Python's ast / regexes; extract.py, the last block).")
open(path, "w").write("\n".join(ls[:k] + [note] + ls[k:] + add) + "\n")
src = show(NR, NRT, "nemo_run/cli/cli_parser.py")
ops = [l.strip() for l in src.splitlines() if re.match(r'\s+(ASSIGN|ADD) = "', l)]
dotted = [l.strip() for l in src.splitlines() if re.search(r'# Check if it\'s a dotted import|if "\." in factory_name:|importlib\.import_module\(module_name\)|return fdl\.build\(partial_factory\)\(\)', l)]
open("/work/main/tests/data/frameworks/nemo-run.txt", "a").write(
    f"## from: NVIDIA/NeMo-Run {NRT} nemo_run/cli/cli_parser.py, Operation (`key+=value` extends a list) and parse_factory's\n"
    "## dotted-import branch (a `pkg.mod.Class(k=v)` value is imported and built), verbatim lines\n" + "\n".join(ops + dotted) + "\n")

# ---- Framework restrictions (issue 30 item 2, planner/export/frameworks.py RESTRICTIONS): each source's quoted
# condition, found as a whole stripped line of the file at its tag/commit, written with its line number
import sys; sys.path.insert(0, "/work/main")
from planner.export.frameworks import RESTRICTIONS, SPELLINGS
MIRROR = {"NVIDIA/Megatron-LM": MG, "pytorch/torchtitan": TT, "deepspeedai/DeepSpeed": DS}
out = []
for src in dict.fromkeys([*(s for r in RESTRICTIONS for s in r.sources), *(s for _, ss in SPELLINGS for s in ss)]):
    text = show(MIRROR[src.repo], src.rev, src.path).splitlines()
    nums = [i + 1 for i, l in enumerate(text) if l.strip() == src.quote]
    assert nums, src
    out += [f"## {src.repo} {src.rev} {src.path}:{','.join(map(str, nums))}", src.quote]
head = """# The conditions planner/export/frameworks.py mirrors, vendored to check its sources offline.
# repos: https://github.com/NVIDIA/Megatron-LM (BSD-3-Clause), https://github.com/pytorch/torchtitan (BSD-3-Clause),
# https://github.com/deepspeedai/DeepSpeed (Apache-2.0). Per source: `## repo rev path:line[,line]`, then the line,
# verbatim with its indentation stripped (found as a whole line of `git show rev:path`).
"""
open("/work/main/tests/data/frameworks/restrictions.txt", "w").write(head + "\n".join(out) + "\n")
