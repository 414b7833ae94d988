"""Read YAML spec files strictly and safely; every problem becomes a `SpecError`.

Plain data only (dict/list/str/int/float/bool/None), a mapping at the top level, no duplicate
or non-string keys, no object-building tags, and bounded size so alias bombs cannot explode.
Only regular files are opened (a FIFO or a device would block or never end).

Numbers follow YAML 1.2 where YAML 1.1 (PyYAML's) would read something else:
- `1:30` is a string (YAML 1.1: sexagesimal 90); `1e9` is a float (YAML 1.1: a string).
- an integer with a leading zero (`024`) is refused: YAML 1.1 reads octal 20, YAML 1.2 reads 24.
- `0x1F` (both) and `0o17` (YAML 1.2) are accepted; so are `0b101` and `1_000` (YAML 1.1): each
  has one reading, and digit groups keep big counts readable.
Line numbers count '\\n' only, as editors do (YAML also breaks lines at U+0085, U+2028, U+2029).
"""
from __future__ import annotations

import errno
import os
import re
import stat
from bisect import bisect_left
from dataclasses import dataclass
from typing import Any

import yaml
from yaml.events import AliasEvent, StreamEndEvent
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from yaml.reader import ReaderError

from planner.errors import SpecError, clip, shown

MAX_FILE_BYTES = 1_000_000
MAX_NODES = 100_000  # values after expanding aliases
MAX_ALIASES = 100
MAX_KEYS = 1000  # keys of one mapping: a spec has a few dozen; fail before parsing 40,000 unknown ones
MAX_DEPTH = 100  # nesting, also after expanding aliases; keeps the recursion far from Python's limit
MAX_NUMBER_CHARS = 1000  # digits beyond this cost quadratic time to convert

_Y = "tag:yaml.org,2002:"
_STR, _MAP, _SEQ, _MERGE = _Y + "str", _Y + "map", _Y + "seq", _Y + "merge"
_SCALAR_TAGS = {_STR, _Y + "int", _Y + "float", _Y + "bool", _Y + "null", _MERGE}
_KINDS = {_STR: "a string", _Y + "int": "an integer", _Y + "float": "a number", _Y + "bool": "a boolean",
          _Y + "null": "null"}
# YAML 1.1 reads 1e9 as a string; accept exponents without a dot or sign, as YAML 1.2 does.
_FLOAT = re.compile(r"""^(?:[-+]?[0-9][0-9_]*\.[0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?[0-9][0-9_]*[eE][-+]?[0-9]+
    |[-+]?\.[0-9][0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?\.(?:inf|Inf|INF)
    |\.(?:nan|NaN|NAN))$""", re.X)
# No sexagesimal (1:30 stays a string); leading-zero decimals resolve as ints so that `build` refuses them.
_INT = re.compile(r"^[-+]?(?:0b[01_]+|0o[0-7_]+|0x[0-9a-fA-F_]+|[0-9][0-9_]*)$")
_BASES = {"0b": 2, "0o": 8, "0x": 16}


def _int(text: str) -> int:
    """An integer of YAML 1.2 (plus 0b and digit groups); ValueError with advice for `024`."""
    digits = text.replace("_", "")
    sign = -1 if digits.startswith("-") else 1
    digits = digits.lstrip("+-")
    if digits[:2] in _BASES:
        return sign * int(digits[2:], _BASES[digits[:2]])
    number = sign * int(digits)
    if len(digits) > 1 and digits.startswith("0"):
        old = f"octal {sign * int(digits, 8)}" if set(digits) <= set("01234567") else "a string"
        raise ValueError(f"{text} is ambiguous: YAML 1.1 reads it as {old}, YAML 1.2 as {number}; write {number}")
    return number


@dataclass(frozen=True)
class LoadedYaml:
    data: Any
    file: str
    lines: dict[tuple, int]

    def line_of(self, path: tuple) -> int | None:
        """Line of the longest known prefix of `path`: a missing key reports its parent's line."""
        for end in range(len(path), -1, -1):
            line = self.lines.get(tuple(path[:end]))
            if line is not None:
                return line
        return None


def _tag(tag: str) -> str:
    return tag.replace(_Y, "!!")


def _kind(node: Node) -> str:
    if isinstance(node, ScalarNode):
        return _KINDS.get(node.tag, "a string")
    return "a list" if isinstance(node, SequenceNode) else "a mapping"


class _Loader(yaml.SafeLoader):
    """SafeLoader that composes with limits; `build` then makes plain data and line numbers."""

    # Drop timestamps (dates stay strings) and '=' (PyYAML cannot construct it); fix ints and floats.
    yaml_implicit_resolvers = {
        ch: [(tag, rx) for tag, rx in rules if tag not in (_Y + "int", _Y + "float", _Y + "timestamp", _Y + "value")]
        for ch, rules in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }

    def __init__(self, text: str, file: str) -> None:
        super().__init__(text)
        self.file, self.aliases, self.depth, self.nodes = file, 0, 0, 0
        self.newlines = [m.start() for m in re.finditer("\n", text)]

    def line_at(self, mark: Any) -> int:
        """1-based line of a mark, counting '\\n' only (the parser also counts U+0085, U+2028, U+2029)."""
        return bisect_left(self.newlines, mark.index) + 1

    def fail(self, message: str, node_or_mark: Any = None, path: tuple = (), expected: str | None = None):
        mark = getattr(node_or_mark, "start_mark", node_or_mark)
        return SpecError(message, file=self.file, line=self.line_at(mark) if mark else None,
                         path=".".join(map(str, path)) or None, expected=expected)

    def get_single_node(self) -> Node | None:
        # As PyYAML's, but a second document gets its own message.
        self.get_event()
        node = None if self.check_event(StreamEndEvent) else self.compose_document()
        if not self.check_event(StreamEndEvent):
            event = self.get_event()
            raise self.fail("a second YAML document starts here", event, expected="a single document")
        self.get_event()
        return node

    def compose_node(self, parent: Node | None, index: Any) -> Node:
        if self.check_event(AliasEvent):
            self.aliases += 1
            if self.aliases > MAX_ALIASES:
                raise self.fail(f"too many aliases (more than {MAX_ALIASES})", self.peek_event())
        self.depth, self.nodes = self.depth + 1, self.nodes + 1
        try:
            if self.nodes > MAX_NODES:  # fail early, before the full (slow) compose of a huge file
                raise self.fail(f"document too large: more than {MAX_NODES} values", self.peek_event())
            if self.depth > MAX_DEPTH:
                raise self.fail(f"nesting deeper than {MAX_DEPTH} levels", self.peek_event())
            if isinstance(parent, MappingNode) and index is None and len(parent.value) >= MAX_KEYS:
                raise self.fail(f"a mapping with more than {MAX_KEYS} keys", self.peek_event(),
                                expected="a spec's few keys (is this file a spec?)")
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1

    def check_size(self, node: Node, depth: int, memo: dict, active: set) -> tuple[int, int]:
        """(values, height) of `node` with aliases expanded; memoized, so shared nodes cost once."""
        key = id(node)
        if key in active:
            raise self.fail("an alias refers to a collection that contains it", node, expected="no recursion")
        if key not in memo:
            active.add(key)
            children = [n for pair in node.value for n in pair] if isinstance(node, MappingNode) else (
                node.value if isinstance(node, SequenceNode) else ())
            count, height = 1, 1
            for child in children:
                c, h = self.check_size(child, depth + 1, memo, active)
                count, height = count + c, max(height, h + 1)
                if depth + height > MAX_DEPTH:  # reported at the collection that holds the deep alias
                    raise self.fail(f"nesting deeper than {MAX_DEPTH} levels once aliases are expanded", node)
                if count > MAX_NODES:
                    raise self.fail(f"document too large: more than {MAX_NODES} values once aliases are "
                                    "expanded", node, expected="a small spec without alias bombs")
            active.discard(key)
            memo[key] = (count, height)
        return memo[key]

    def check_tag(self, node: Node, path: tuple) -> None:
        allowed = _SCALAR_TAGS if isinstance(node, ScalarNode) else (_SEQ if isinstance(node, SequenceNode) else _MAP,)
        if node.tag not in allowed:  # !!python/..., !!set, !custom: nothing but plain data gets built
            raise self.fail(f"YAML tag {_tag(node.tag)} is not allowed", node, path,
                            expected="plain YAML values (mappings, lists, strings, numbers, booleans, null)")

    def build(self, node: Node, path: tuple) -> tuple[Any, Any]:
        """(data, line tree). The tree maps key/index -> (line, subtree); fresh copies per alias use."""
        self.check_tag(node, path)
        if isinstance(node, SequenceNode):
            data, tree = [], {}
            for i, item in enumerate(node.value):
                value, sub = self.build(item, path + (i,))
                data.append(value)
                tree[i] = (self.line_at(item.start_mark), sub)
            return data, tree
        if isinstance(node, MappingNode):
            return self.build_mapping(node, path)
        if node.tag in (_STR, _MERGE):
            return node.value, None
        if node.tag in (_Y + "int", _Y + "float") and len(node.value) > MAX_NUMBER_CHARS:
            raise self.fail(f"number too long ({len(node.value)} characters)", node, path)
        if node.tag == _Y + "int" and _INT.match(node.value):
            try:
                return _int(node.value), None
            except ValueError as exc:
                raise self.fail(str(exc), node, path, expected="an integer without a leading zero") from None
        try:
            return self.yaml_constructors[node.tag](self, node), None
        except (ValueError, KeyError, OverflowError):
            raise self.fail(f"cannot read {shown(node.value)} as {_tag(node.tag)}", node, path,
                            expected=_KINDS.get(node.tag)) from None

    def build_mapping(self, node: MappingNode, path: tuple) -> tuple[dict, dict]:
        data, tree, seen = {}, {}, {}  # seen: explicit key -> line (merged keys may be overridden)
        for key_node, value_node in node.value:
            line = self.line_at(key_node.start_mark)
            if key_node.tag == _MERGE:  # '<<: *base' copies keys that this mapping does not set
                sources = value_node.value if isinstance(value_node, SequenceNode) else [value_node]
                if not all(isinstance(s, MappingNode) for s in sources):
                    raise self.fail("'<<' must merge a mapping or a list of mappings", key_node, path)
                for source in reversed(sources):  # earlier sources win
                    d, t = self.build(source, path)
                    data.update((k, v) for k, v in d.items() if k not in seen)
                    tree.update((k, v) for k, v in t.items() if k not in seen)
                continue
            if not (isinstance(key_node, ScalarNode) and key_node.tag == _STR):
                what = shown(key_node.value) if isinstance(key_node, ScalarNode) else _kind(key_node)
                raise self.fail(f"key {what} is not a string (YAML reads it as {_tag(key_node.tag)})",
                                key_node, path, expected="a string key; quote it, e.g. \"1\": ...")
            key = key_node.value
            if key in seen:
                raise self.fail(f"duplicate key {shown(key)} (first at line {seen[key]}, again at line {line})",
                                key_node, path + (key,), expected="each key once per mapping")
            seen[key] = line
            data[key], sub = self.build(value_node, path + (key,))
            tree[key] = (line, sub)
        return data, tree


_Loader.add_implicit_resolver(_Y + "float", _FLOAT, list("-+0123456789."))
_Loader.add_implicit_resolver(_Y + "int", _INT, list("-+0123456789"))


def _flatten(tree: Any, path: tuple, out: dict[tuple, int]) -> None:
    for key, (line, sub) in (tree or {}).items():
        out[path + (key,)] = line
        _flatten(sub, path + (key,), out)


def _syntax_error(exc: yaml.MarkedYAMLError, text: str, file: str) -> SpecError:
    mark = exc.problem_mark or exc.context_mark
    index = min(mark.index, len(text)) if mark else 0
    start = text.rfind("\n", 0, index) + 1  # line and column as an editor counts them
    line, column = (text.count("\n", 0, index) + 1, index - start + 1) if mark else (None, None)
    problem = clip(exc.problem or exc.context or "invalid YAML", 200)
    if "'\\t'" in problem and mark is not None:
        if text[start:index].strip(" \t") == "":
            return SpecError("tab character used for indentation; YAML needs spaces", file=file, line=line,
                             expected="spaces for indentation")
        return SpecError(f"tab character at column {column}; YAML needs spaces here", file=file,
                         line=line, expected="spaces instead of tabs")
    if exc.context and problem == "second occurrence":  # duplicate anchor: the context says which
        problem = clip(exc.context.removesuffix("; first occurrence"), 200)
    where = f" at column {column}" if mark else ""
    breaks = [c for c in "\x85\u2028\u2029" if c in text[text.rfind("\n", 0, max(start - 1, 0)) + 1:index + 1]]
    if breaks:  # invisible in an editor, a line break to YAML 1.1
        problem += f" (YAML reads the character U+{ord(breaks[0]):04X} on this line or the one before as a line break)"
    return SpecError(f"invalid YAML{where}: {problem}", file=file, line=line, expected="valid YAML syntax")


def load_yaml_text(text: str, file: str = "<string>") -> LoadedYaml:
    """Parse YAML text holding one mapping; raise `SpecError` for anything else."""
    if len(text) > MAX_FILE_BYTES:
        raise SpecError(f"input too large ({len(text)} characters; the limit is {MAX_FILE_BYTES})", file=file)
    text = text.removeprefix("\ufeff")
    try:
        loader = _Loader(text, file)
        try:
            root = loader.get_single_node()
            if root is None or (isinstance(root, ScalarNode) and root.tag == _Y + "null" and root.value == ""):
                raise SpecError("file is empty", file=file, line=1, expected="a YAML mapping")
            loader.check_tag(root, ())
            if not isinstance(root, MappingNode):
                raise loader.fail(f"expected a mapping at the top level, found {_kind(root)}", root,
                                  expected="a YAML mapping of key: value lines")
            loader.check_size(root, 0, {}, set())
            data, tree = loader.build(root, ())
        finally:
            loader.dispose()
    except yaml.MarkedYAMLError as exc:
        raise _syntax_error(exc, text, file) from None
    except ReaderError as exc:  # control characters and the like
        line = text[: exc.position].count("\n") + 1
        code = ord(exc.character) if isinstance(exc.character, str) else exc.character
        raise SpecError(f"character U+{code:04X} is not allowed in YAML", file=file, line=line,
                        expected="printable text") from None
    except (yaml.YAMLError, RecursionError) as exc:  # last resort: still a user-facing message
        raise SpecError(f"cannot read YAML: {exc}"[:200], file=file) from None
    lines = {(): 1}
    _flatten(tree, (), lines)
    return LoadedYaml(data=data, file=file, lines=lines)


def _open_regular(path: str | os.PathLike, file: str) -> int:
    """A descriptor of `path` opened for reading, which must be a regular file. O_NONBLOCK: opening a
    FIFO returns at once (and is then refused) instead of waiting for a writer forever."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except (FileNotFoundError, NotADirectoryError):
        raise SpecError("file not found", file=file, expected="a path to an existing file") from None
    except IsADirectoryError:
        raise SpecError("is a directory, not a file", file=file, expected="a path to a file") from None
    except PermissionError:
        raise SpecError("permission denied: cannot read the file", file=file, expected="a readable file") from None
    except OSError as exc:
        if exc.errno == errno.ENAMETOOLONG:
            raise SpecError("file name too long (the system allows 255 bytes per name)", file=file,
                            expected="a shorter path or name") from None
        if exc.errno == errno.ENXIO:  # a socket
            raise SpecError("not a regular file", file=file, expected="a path to a regular file") from None
        raise SpecError(f"cannot read the file: {exc.strerror or exc}", file=file) from None
    except ValueError as exc:  # a NUL byte in the path
        raise SpecError(f"cannot read the file: {exc}", file=file) from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        what = "is a directory, not a file" if stat.S_ISDIR(mode) else (
            "not a regular file (a FIFO)" if stat.S_ISFIFO(mode) else "not a regular file (a device or socket)")
        raise SpecError(what, file=file, expected="a path to a regular file")
    return fd


def read_bounded(path: str | os.PathLike, limit: int = MAX_FILE_BYTES) -> bytes:
    """The bytes of a regular file of at most `limit` bytes (read, never written); else `SpecError`."""
    file = os.fsdecode(path)
    with os.fdopen(_open_regular(path, file), "rb") as handle:  # bounded: a growing file cannot exhaust memory
        size = os.fstat(handle.fileno()).st_size
        try:
            raw = handle.read(limit + 1) if size <= limit else b""
        except OSError as exc:  # EIO, EISDIR on odd file systems
            raise SpecError(f"cannot read the file: {exc.strerror or exc}", file=file) from None
    if max(size, len(raw)) > limit:
        what = "a spec file under 1 MB" if limit == MAX_FILE_BYTES else f"a file of at most {limit} bytes"
        raise SpecError(f"file too large ({max(size, len(raw))} bytes; the limit is {limit} bytes)",
                        file=file, expected=what)
    return raw


def load_yaml_file(path: str | os.PathLike) -> LoadedYaml:
    """Read (never write) one YAML spec file, UTF-8 with an optional BOM, at most MAX_FILE_BYTES."""
    file = os.fsdecode(path)
    raw = read_bounded(path)
    try:
        text = raw.removeprefix(b"\xef\xbb\xbf").decode("utf-8")
    except UnicodeDecodeError as exc:
        offset = exc.start + (3 if raw.startswith(b"\xef\xbb\xbf") else 0)
        raise SpecError(f"not valid UTF-8: byte 0x{raw[offset]:02x} at offset {offset}", file=file,
                        line=raw[:offset].count(b"\n") + 1, expected="a UTF-8 text file") from None
    return load_yaml_text(text, file)


class SpecDumper(yaml.SafeDumper):
    """YAML out that the strict reader reads back as written."""


_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]*")
_WORDS = {"y", "n", "yes", "no", "on", "off", "true", "false", "null"}


def _str(dumper: yaml.SafeDumper, text: str) -> yaml.ScalarNode:
    """Quoted unless plainly a word: a name like `1e5` or `no` must load back as a string."""
    plain = _PLAIN.fullmatch(text) and text.lower() not in _WORDS
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style=None if plain else '"')


SpecDumper.add_representer(str, _str)


def _tuple(dumper: yaml.SafeDumper, value: tuple) -> yaml.SequenceNode:
    return dumper.represent_list(list(value))


SpecDumper.add_representer(tuple, _tuple)


def dump_yaml(data) -> str:
    """A spec's mapping as YAML that load_yaml_text reads back equal (plan calibrate, plan runs import)."""
    return yaml.dump(data, Dumper=SpecDumper, sort_keys=False, default_flow_style=None, allow_unicode=True, width=120)
