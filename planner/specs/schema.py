"""JSON Schema of each spec kind, for editors whose YAML language server validates as you type.

The schemas come from the pydantic specs, plus what the loader accepts beyond them: an optional
`kind:` key, a shipped GPU preset name for a cluster's `gpu:`, and names or paths for a plan's
`model:` and `cluster:`. Every kind `plan check` reads has one (FILE_KINDS), so the schema of any
kind accepts every shipped file under configs/.
"""
from __future__ import annotations

from typing import Any, Callable

from pydantic import BaseModel

from planner.check import PlanFile, PlanLayout
from planner.specs.loading import FILE_KINDS, SIGNATURES, shipped_names
from planner.specs import ClusterSpec, GpuSpec, ModelSpec, StackSpec
from planner.specs.jobs import JobsSpec  # not planner.allocate: that imports OR-Tools


def _runs() -> type[BaseModel]:
    from planner.fidelity.runs import RunsFile

    return RunsFile


def _profile() -> type[BaseModel]:
    from planner.specs.profile import ProfileSpec

    return ProfileSpec


def _sweep() -> type[BaseModel]:
    from planner.sweep.spec import SweepSpec

    return SweepSpec


# kind -> its spec class (that of sweep imported when needed), in the order of FILE_KINDS
SPECS: dict[str, type[BaseModel] | Callable[[], type[BaseModel]]] = {
    "gpu": GpuSpec, "cluster": ClusterSpec, "model": ModelSpec, "stack": StackSpec, "layout": PlanLayout,
    "plan": PlanFile, "sweep": _sweep, "jobs": JobsSpec, "runs": _runs, "profile": _profile}
assert tuple(SPECS) == FILE_KINDS, "a kind plan check reads has no schema"
# kinds whose keys may all be left out: `plan check` tells them by `kind:` or one of their keys (SIGNATURES)
_DETECTED = ("stack", "sweep")
DRAFT = "https://json-schema.org/draft/2020-12/schema"


def spec_class(kind: str) -> type[BaseModel]:
    spec = SPECS[kind]
    return spec if isinstance(spec, type) else spec()


def _gpu_preset() -> dict:
    names = shipped_names("gpu")
    preset: dict[str, Any] = {"type": "string", "description": "a shipped GPU preset"}
    if names:
        preset["enum"] = names
    return preset


def _patch(schema: dict) -> dict:
    """Let `gpu:` name a preset wherever a ClusterSpec or a PoolSpec appears (top level or in $defs);
    a cluster with `pools:` may leave out `gpu`, `nodes` and `node` (the first pool's)."""
    for node in [schema, *schema.get("$defs", {}).values()]:
        props = node.get("properties", {})
        if node.get("title") in ("ClusterSpec", "PoolSpec") and "gpu" in props:
            props["gpu"] = {"anyOf": [props["gpu"], _gpu_preset()], "description": "a GPU mapping or preset name"}
        if node.get("title") == "ClusterSpec" and "pools" in props:
            derived = ["gpu", "nodes", "node"]
            node["required"] = [k for k in node.get("required", []) if k not in derived]
            node["anyOf"] = [{"required": derived}, {"required": ["pools"]}]
    return schema


def json_schema(kind: str) -> dict:
    """The JSON Schema (draft 2020-12) of one kind of spec file."""
    if kind not in SPECS:
        from planner.errors import SpecError

        raise SpecError(f"unknown kind '{kind}'", path="KIND", expected=f"one of: {', '.join(SPECS)}")
    schema = _patch(spec_class(kind).model_json_schema())
    own = {k: v for k, v in schema["properties"].items() if k != "kind"}  # a sweep's and a jobs file's own `kind`
    schema["properties"] = {"kind": {"const": kind, "description": "what this file is (optional)"}, **own}
    if kind in _DETECTED:  # else plan check cannot tell what the file is
        schema["anyOf"] = [{"required": ["kind"]}, *({"required": [key]} for key in sorted(SIGNATURES[kind]))]
    if kind == "plan":
        for key in ("model", "cluster"):
            schema["properties"][key]["description"] = f"a shipped {key} name, a path relative to this file, or inline"
    return {"$schema": DRAFT, "$id": f"https://planner.invalid/schema/{kind}.json", **schema}


def any_schema() -> dict:
    """One schema that accepts a file of any kind (for a whole `configs/` folder)."""
    defs: dict[str, Any] = {}
    options = []
    for kind in SPECS:
        schema = json_schema(kind)
        defs.update(schema.pop("$defs", {}))
        for key in ("$schema", "$id"):
            schema.pop(key)
        defs[f"{kind}_file"] = schema
        options.append({"$ref": f"#/$defs/{kind}_file"})
    return {"$schema": DRAFT, "$id": "https://planner.invalid/schema/any.json", "title": "planner spec file",
            "anyOf": options, "$defs": defs}
