"""A command line generated from a frozen config dataclass by tyro: one field, one flag.

    FLAGS = Flags(Config, prog="cfka di-attention", choices={"preset": lambda: list(BIOGRAPHY)},
                  names={"num_boot": "bootstrap"}, aliases={"legacy": ("--skip-legacy",)}, required=("out",))
    cfg = FLAGS.parse(argv)                  # a Config, validated by its own __post_init__

What tyro derives from the class, and what :class:`Flags` adds:

* every field is an option ``--kebab-case-name`` with the field's type and default; its help is the field's
  docstring or attribute comment (tyro reads them from the class source);
* ``choices`` turns a ``str`` field into a choice among a registry's names (``runs/presets.BIOGRAPHY``,
  ``models/family``, method registries), read when the parser is built so a new registry entry is a new choice;
* a ``bool`` field is one flag that flips its default (``--no-retention`` for a field that defaults to True,
  ``--pt-checkpoint`` for one that defaults to False), and its help says what the flag does (``--no-progress
  progress bars (on by default; this flag turns it off)``, ``--remat ... (off by default)``) rather than tyro's
  "(default: True)"; a help that names its own default (``"(default: the preset's)"``) gets no second one;
  ``aliases`` keeps an older spelling (``--skip-legacy``);
* an ``int`` field (or ``int | None``, or the items of a ``tuple[int, ...]``) takes an integer >= 0 and a ``float``
  field a finite number (:func:`number`; no option of the project takes a negative integer, NaN or ±inf): a value
  outside is a parse error naming the option, exit 2; the config's ``__post_init__`` narrows the range;
* ``parsers`` gives a field a converter of its one token (``values.float_arg(lo=0.0)``, ``values.floats_arg``,
  ``int_arg``): a value it rejects (``ValueError``, ``argparse.ArgumentTypeError``) is a parse error naming the
  option, exit 2, before anything runs;
* ``layered`` names a field holding a file of field values (``cfka sweep --config grid.toml``) and its reader:
  the file's values replace the defaults, the command line's flags replace the file's;
* a ``tuple[T, ...]`` field takes comma-separated items (``--alphas 0.5,0.9``; also space-separated, and
  ``--measures ""`` is the empty tuple), each converted to ``T`` and checked against ``choices`` when given;
  ``extend`` lets the option repeat, each occurrence adding items (``--extra a.py --extra b.py``); ``spaced``
  keeps a tuple of file names space-separated only (``--data a.txt b,c.txt``);
* ``inputs`` names the fields that name input files or folders: each must exist (exit 2, one line naming the
  option) before the config is built;
* ``names`` keeps an option whose name predates the field (``--bootstrap`` for ``num_boot``), ``required``
  makes a field with a library default a required option, ``hidden`` leaves a field off the command line,
  ``positional`` makes a field a positional argument (``cfka report RUN_DIR ...``), ``metavars`` names a
  value in the usage line, ``nested`` gives a field holding a config its own :class:`Flags`, whose options are
  this command's (``--score-norm`` for ``replay.score_norm``);
* ``--config FILE`` exists on every command whose config has no field of that name: a TOML / YAML / JSON file of
  option values (keys spelled as the fields or the options) over the defaults, each checked as its flag would be,
  and the flags over the file (:meth:`Flags.file_defaults`);
* :class:`Subcommands` puts several configs behind one command's first word, in one tyro parse
  (``cfka geometry onestep --eta 1e-4``); each keeps its own :class:`Flags`;
* :func:`script_main` is the ``python -m`` entry of a study script that has no ``cfka`` subcommand: the same
  parse, and the same one-line errors with exit status 2.

Errors keep the project's contract (``cfka_jax/cli.py``): a value tyro rejects (an unknown choice, a bad number,
an unknown option) prints ONE line ``prog: error: ...`` naming the option and exits with status 2, instead of
tyro's framed box; the config's own ``ValueError`` (from ``__post_init__``) propagates to the caller, which
prints it as one line, or as a traceback under ``CFKA_TRACEBACK=1``.

A leaf module: it imports only tyro and the standard library (the registries are passed in), so every
experiment script can generate its parser from it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import io
import math
import os
import re
import sys
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Annotated, Any, Literal

import tyro

_BOX = "╭╮╰╯│─"
CONFIG_HELP = ("Options may also come from --config FILE (TOML, YAML or JSON; keys are the option names; the flags "
               "override the file).")


def one_line(box: str) -> str:
    """tyro's framed error message as one line: the text between the title bar and the first rule after it, joined
    (a frame drawn in box characters, or, where the terminal has none, a title and rules of dashes)."""
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", line).strip().strip(_BOX).strip() for line in box.splitlines()]
    body = []
    for line in lines[1:]:
        if line and set(line) <= set(_BOX + "-=+ "):  # a rule: the end of the message, or the title's underline
            if body:
                break
            continue
        if line:
            body.append(line)
    title = lines[0].strip(_BOX + " ") if lines else ""
    return " ".join(body) if body else title or "invalid arguments"


def number(kind: type, text: str):
    """One command-line number: an ``int`` >= 0 (counts, sizes, steps, seeds: no option of the project takes a
    negative integer) or a finite ``float`` (NaN and ±inf are never a setting); any other ``kind`` as it converts.

    Raises:
      ValueError: the text is not such a number (the caller names the option).
    """
    if kind is int:
        try:
            value = int(text)
        except ValueError:
            raise ValueError(f"expected an integer >= 0, got {text!r}") from None
        if value < 0:
            raise ValueError(f"expected an integer >= 0, got {value}")
        return value
    if kind is float:
        try:
            value = float(text)
        except ValueError:
            raise ValueError(f"expected a finite number, got {text!r}") from None
        if not math.isfinite(value):
            raise ValueError(f"expected a finite number, got {text!r}")
        return value
    return kind(text)


def _items(name: str, item: type, choices: Sequence[str] | None, extend: bool = False):
    """tyro's constructor of a ``tuple[item, ...]`` option from comma- and/or space-separated tokens (numbers
    checked by :func:`number`)."""

    def parse(tokens: list[str]) -> tuple:
        raw = [t.strip() for token in tokens for t in token.split(",") if t.strip()]
        if choices is not None:
            bad = [t for t in raw if t not in choices]
            if bad:
                raise ValueError(f"unknown {bad}; choose from {', '.join(choices)}")
        out = []
        for i, t in enumerate(raw):
            try:
                out.append(number(item, t))
            except ValueError as err:
                raise ValueError(f"item {i + 1} ({t!r}): {err}") from None
        return tuple(out)

    return tyro.constructors.PrimitiveConstructorSpec(
        nargs="*", metavar=f"{item.__name__.upper()},...", instance_from_str=parse,
        is_instance=lambda x: isinstance(x, tuple), str_from_instance=lambda t: [",".join(map(str, t))],
        _action="append" if extend else None)


def _flat(value):
    """An ``extend`` option's value: tyro's one tuple per occurrence, joined (a default stays as it is)."""
    return tuple(x for group in value for x in (group if isinstance(group, tuple) else (group,)))


def _parsed(name: str, parse: Callable[[str], Any], metavar: str, is_tuple: bool):
    """tyro's constructor of an option converted (and checked) by ``parse`` from its token(s), joined by commas."""

    def convert(tokens: list[str]):
        try:
            return parse(",".join(tokens))
        except Exception as err:  # noqa: BLE001 (argparse.ArgumentTypeError is not a ValueError)
            raise ValueError(str(err)) from None

    return tyro.constructors.PrimitiveConstructorSpec(
        nargs="*" if is_tuple else 1, metavar=metavar, instance_from_str=convert, is_instance=lambda x: True,
        str_from_instance=lambda v: [",".join(map(str, v)) if isinstance(v, tuple) else str(v)])


def _hint(tp: Any, default: Any, help_text: str | None) -> str | None:
    """The text after a field's help: what a boolean flag does, nothing where the help already names the default
    (``"(default: the preset's)"``), else tyro's ``(default: ...)``."""
    if tp is bool:
        return "(on by default; this flag turns it off)" if default is True else "(off by default)"
    if help_text and "default" in help_text.lower():
        return ""
    return None


def _field_doc(cls: type, name: str) -> str | None:
    """The help tyro reads for a field (its docstring or comment), to see whether it already names the default."""
    try:
        from tyro import _docstrings

        return _docstrings.get_field_docstring(cls, name, ())
    except Exception:  # noqa: BLE001 (a private helper of tyro: without it, tyro's default hint stays)
        return None


def _scalar(tp: Any) -> Any:
    """``T`` of a field typed ``T`` or ``T | None``."""
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    return args[0] if typing.get_origin(tp) in (typing.Union, types.UnionType) and len(args) == 1 else tp


def _tuple_item(tp: Any) -> type | None:
    if typing.get_origin(tp) is tuple:
        args = typing.get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis and args[0] in (str, int, float):
            return args[0]
    return None


@dataclasses.dataclass(frozen=True)
class Flags:
    """How one config class becomes a command line (module docstring)."""

    config: type
    prog: str
    description: str | None = None
    choices: Mapping[str, Callable[[], Sequence[str]]] = dataclasses.field(default_factory=dict)
    names: Mapping[str, str] = dataclasses.field(default_factory=dict)
    aliases: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    required: tuple[str, ...] = ()
    hidden: tuple[str, ...] = ()
    positional: tuple[str, ...] = ()
    help: Mapping[str, str] = dataclasses.field(default_factory=dict)
    metavars: Mapping[str, str] = dataclasses.field(default_factory=dict)
    nested: Mapping[str, Flags] = dataclasses.field(default_factory=dict)
    parsers: Mapping[str, Callable[[str], Any]] = dataclasses.field(default_factory=dict)
    layered: tuple[str, Callable[[str], Mapping[str, Any]]] | None = None
    extend: tuple[str, ...] = ()
    spaced: tuple[str, ...] = ()
    inputs: tuple[str, ...] = ()

    def __post_init__(self):
        fields = {f.name for f in dataclasses.fields(self.config)}
        for what in ("choices", "names", "aliases", "required", "hidden", "positional", "help", "metavars",
                     "nested", "parsers", "extend", "spaced", "inputs"):
            unknown = set(getattr(self, what)) - fields
            if unknown:
                raise ValueError(f"Flags({self.config.__name__}).{what}: no such field {sorted(unknown)}")
        if self.layered is not None and self.layered[0] not in fields:
            raise ValueError(f"Flags({self.config.__name__}).layered: no such field {self.layered[0]!r}")

    def command(self) -> type:
        """A subclass of the config whose annotations carry the flags (tyro reads help from the parent's source);
        its ``__post_init__`` is skipped, the config is built (and validated) once, from the parsed fields."""
        hints = typing.get_type_hints(self.config)
        doc = self.description or self.config.__doc__ or ""
        if self.layered is None and "config" not in {f.name for f in dataclasses.fields(self.config)}:
            doc = (doc.rstrip() + " " if doc else "") + CONFIG_HELP
        ns: dict[str, Any] = {"__annotations__": {}, "__module__": self.config.__module__, "__doc__": doc,
                              "__post_init__": lambda _: None, "__qualname__": self.config.__qualname__}
        for f in dataclasses.fields(self.config):
            tp, markers = hints[f.name], []
            choices = tuple(self.choices[f.name]()) if f.name in self.choices else None
            item = _tuple_item(tp)
            default = f.default if f.default is not dataclasses.MISSING else None
            help_text = self.help.get(f.name) or _field_doc(self.config, f.name)
            hint = _hint(tp, default, help_text)
            if f.name in self.parsers:
                base = item if item is not None else next((a for a in typing.get_args(tp) if a is not type(None)), tp)
                metavar = getattr(base, "__name__", "VALUE").upper() + (",..." if item is not None else "")
                markers.append(_parsed(f.name, self.parsers[f.name], metavar, item is not None))
            elif f.name in self.nested:  # a nested config's fields are flags of this command, without a prefix
                tp = self.nested[f.name].command()
                markers.append(tyro.conf.OmitArgPrefixes)
            elif f.name in self.positional:
                markers.append(tyro.conf.Positional)
            elif f.name in self.spaced:
                pass  # tyro's own tuple option: space-separated items, no comma split (file names)  # a positional tuple takes space-separated items (paths)
            elif item is not None:
                markers.append(_items(f.name, item, choices, extend=f.name in self.extend))
            elif _scalar(tp) in (int, float):  # every number is checked as it is parsed, naming the option
                kind = _scalar(tp)
                markers.append(_parsed(f.name, functools.partial(number, kind), kind.__name__.upper(), False))
            elif choices is not None:
                if tp not in (str, str | None):
                    raise TypeError(f"choices for {self.config.__name__}.{f.name}: a str field, not {tp}")
                tp = Literal[choices] if tp is str else Literal[choices] | None
            arg = {k: v for k, v in (("name", self.names.get(f.name)), ("aliases", self.aliases.get(f.name)),
                                     ("help", self.help.get(f.name)), ("help_behavior_hint", hint),
                                     ("metavar", self.metavars.get(f.name))) if v is not None}
            if arg:
                markers.append(tyro.conf.arg(**arg))
            if f.name in self.hidden:
                markers.append(tyro.conf.Suppress)
            ns["__annotations__"][f.name] = Annotated[(tp, *markers)] if markers else tp
            if f.name in self.required:
                ns[f.name] = dataclasses.field(default=tyro.MISSING)
            elif f.name in self.nested and f.default is not dataclasses.MISSING:
                ns[f.name] = tp(**_values(f.default))
            elif f.default is not dataclasses.MISSING:
                ns[f.name] = f.default
            elif f.default_factory is not dataclasses.MISSING:
                ns[f.name] = dataclasses.field(default_factory=f.default_factory)
        return dataclasses.dataclass(frozen=True, kw_only=True)(type(self.config.__name__, (self.config,), ns))

    def _parse(self, command: type, argv: list[str], default: Any = None):
        return _parse(command, argv, self.prog, default)

    def repeatable(self) -> set[str]:
        """The options that may repeat: the ``extend`` fields' (with their ``names`` and ``aliases``), and those of
        the ``nested`` configs."""
        out = set()
        for name in self.extend:
            out.add("--" + self.names.get(name, name).replace("_", "-"))
            out.update(self.aliases.get(name, ()))
        for flags in self.nested.values():
            out |= flags.repeatable()
        return out

    def refuse_repeats(self, argv: Sequence[str]) -> None:
        """A single-valued option given twice is an error (exit 2, one line naming it), not "the last one wins":
        ``--data a.jsonl --data b.jsonl`` would otherwise train on ``b.jsonl`` alone."""
        seen: dict[str, int] = {}
        for token in argv:
            if token == "--":
                break
            if token.startswith("--") and len(token) > 2:
                option = token.split("=", 1)[0]
                seen[option] = seen.get(option, 0) + 1
        twice = sorted(o for o, n in seen.items() if n > 1 and o not in self.repeatable())
        if twice:
            print(f"{self.prog}: error: {', '.join(twice)} given more than once; give each option once (an option "
                  "that takes several values takes them in one occurrence: comma- or space-separated)",
                  file=sys.stderr)
            raise SystemExit(2)

    def values(self, argv: Sequence[str] | None = None) -> dict:
        """The field values from ``argv`` (default ``sys.argv[1:]``), nested configs built, this config not yet:
        defaults ← the ``layered`` file (if named) ← the flags; or, for a command without a ``layered`` field,
        defaults ← ``--config FILE`` (:meth:`file_defaults`) ← the flags."""
        argv = sys.argv[1:] if argv is None else list(argv)
        self.refuse_repeats(argv)
        command = self.command()
        argv, path = self._config_option(argv)
        if path is not None:
            parsed = self._parse(command, argv, default=command(**self.file_defaults(path, command)))
            self.check_inputs(parsed)
            return self._fields(parsed)
        parsed = self._parse(command, argv)
        self.check_inputs(parsed)
        if self.layered is not None and getattr(parsed, self.layered[0]) is not None:
            field, read = self.layered
            base = {f.name: getattr(parsed, f.name) for f in dataclasses.fields(command)}
            base.update({f.name: f.default for f in dataclasses.fields(command)
                         if f.default is not dataclasses.MISSING})
            base.update(read(getattr(parsed, field)), **{field: getattr(parsed, field)})
            parsed = self._parse(command, argv, default=command(**base))
        return self._fields(parsed)

    def check_inputs(self, parsed) -> None:
        """Every file or folder an ``inputs`` option names exists (exit 2, one line naming the option), before the
        config is built or anything runs."""
        for name in self.inputs:
            value = getattr(parsed, name)
            for item in value if isinstance(value, tuple) else (value,):
                if item not in (None, "") and not os.path.exists(item):
                    option = "--" + self.names.get(name, name).replace("_", "-")
                    _fail(self.prog, f"{option} {item}: no such file or folder")

    def _config_option(self, argv: list[str]) -> tuple[list[str], str | None]:
        """``argv`` without ``--config FILE`` / ``--config=FILE``, and FILE; the option exists on every command
        whose config has no field of that name (``cfka sweep`` reads its own ``--config``)."""
        fields = {f.name for f in dataclasses.fields(self.config)}
        if self.layered is not None or "config" in fields:
            return argv, None
        out, path, i = [], None, 0
        while i < len(argv):
            token = argv[i]
            if token == "--":
                out += argv[i:]
                break
            if token == "--config" or token.startswith("--config="):
                if token == "--config":
                    if i + 1 >= len(argv):
                        _fail(self.prog, "--config needs a FILE (TOML, YAML or JSON of this command's options)")
                    path, i = argv[i + 1], i + 2
                else:
                    path, i = token.split("=", 1)[1], i + 1
                continue
            out.append(token)
            i += 1
        return out, path

    def file_defaults(self, path: str, command: type | None = None) -> dict:
        """The fields of :meth:`command` with the values of a config file over the defaults: a TOML (``.toml``),
        YAML (``.yaml`` / ``.yml``) or JSON file whose keys are this command's options (``lora_rank`` or
        ``lora-rank``, or the option's own name), its nested configs' options included. Each value is checked as its
        flag would be (type, choices, the option's range check); the flags then override the file.

        Raises:
          ValueError: an unreadable file, an unknown key, or a bad value, naming the file and the key.
        """
        command = command or self.command()
        data = _read_config(path)
        owner = {}  # key spelling → (flags, field)
        for flags in (self, *self.nested.values()):
            for f in dataclasses.fields(flags.config):
                if f.name in flags.nested or f.name in flags.hidden:
                    continue
                for key in {f.name, f.name.replace("_", "-"), flags.names.get(f.name, f.name),
                            flags.names.get(f.name, f.name).replace("_", "-")}:
                    owner[key] = (flags, f.name)
        base = {f.name: getattr(command, f.name) for f in dataclasses.fields(command)
                if f.default is not dataclasses.MISSING or hasattr(command, f.name)}
        nested_values = {name: {} for name in self.nested}
        for key, value in data.items():
            if key not in owner:
                raise ValueError(f"{path}: unknown key {key!r}; {self.prog}'s options are "
                                 + ", ".join(sorted({k for k in owner if "-" not in k})))
            flags, field = owner[key]
            value = flags._checked(field, value, f"{path}: key {key!r}")
            if flags is self:
                base[field] = value
            else:
                nested_values[next(n for n, fl in self.nested.items() if fl is flags)][field] = value
        for name, values in nested_values.items():
            if values:
                current = base.get(name)  # the command's default instance of its nested class
                inner = type(current) if current is not None else self.nested[name].command()
                fields = {f.name: getattr(current, f.name) for f in dataclasses.fields(inner)} if current else {}
                base[name] = inner(**{**fields, **values})
        return base

    def _checked(self, field: str, value: Any, where: str) -> Any:
        """A config file's value of ``field``, converted and checked as the field's flag would be."""
        hint = typing.get_type_hints(self.config)[field]
        item = _tuple_item(hint)
        if item is not None and isinstance(value, list):
            value = tuple(value)
        if field in self.parsers:
            text = ",".join(map(str, value)) if isinstance(value, tuple) else str(value)
            try:
                return self.parsers[field](text)
            except Exception as err:  # noqa: BLE001 (argparse.ArgumentTypeError is not a ValueError)
                raise ValueError(f"{where}: {err}") from None
        if not _fits(value, hint):
            raise ValueError(f"{where}: expected {getattr(hint, '__name__', hint)}, got {value!r}")
        kind = item or _scalar(hint)
        if kind in (int, float) and field not in self.choices:  # the range check of the flag (:func:`number`)
            for v in (value if isinstance(value, tuple) else (value,)):
                try:
                    v is None or number(kind, str(v))
                except ValueError as err:
                    raise ValueError(f"{where}: {err}") from None
        if field in self.choices:
            allowed = tuple(self.choices[field]())
            bad = [v for v in (value if isinstance(value, tuple) else (value,)) if v is not None and v not in allowed]
            if bad:
                raise ValueError(f"{where}: {bad[0]!r} is not one of {', '.join(allowed)}")
        return value

    def _fields(self, parsed) -> dict:
        values = _values(parsed, self.config)
        for name in self.extend:
            values[name] = _flat(values[name])
        for name, flags in self.nested.items():
            values[name] = flags.build(values[name])
        return values

    def parse(self, argv: Sequence[str] | None = None):
        """The config from ``argv`` (default ``sys.argv[1:]``), validated once by its own ``__post_init__``; a value
        its checks refuse names the ``--config`` file it may have come from."""
        argv = sys.argv[1:] if argv is None else list(argv)
        values = self.values(argv)
        _, path = self._config_option(argv)
        try:
            return self.config(**values)
        except ValueError as err:
            if path is None:
                raise
            raise ValueError(f"{err} (options from --config {path} and the command line)") from None

    def build(self, parsed):
        """The config (validated once) from tyro's instance of :meth:`command`."""
        return self.config(**self._fields(parsed))


def script_main(flags: Flags | Subcommands, command: Callable[[Any], int], argv: Sequence[str] | None = None) -> int:
    """The ``python -m cfka_jax.experiments.<study>`` entry of a study script: ``command(flags.parse(argv))``. A
    value the parser refuses exits 2 with one line (as always); a ``ValueError`` or ``OSError`` of the config's
    ``__post_init__`` or of the run (a bad value, a missing or malformed input) prints one line
    ``prog: error: ...`` on stderr and exits with status 2, as under ``cfka`` (``cfka_jax/cli.py``); set
    ``CFKA_TRACEBACK=1`` for the traceback."""
    try:
        return command(flags.parse(argv))
    except (ValueError, OSError) as err:
        if os.environ.get("CFKA_TRACEBACK"):
            raise
        _fail(flags.prog, str(err))


@dataclasses.dataclass(frozen=True)
class Subcommands:
    """One command whose first word picks one of several configs (``cfka geometry onestep --eta 1e-4``): one tyro
    parse of the union of their generated classes; each keeps its own :class:`Flags` (choices, names, help), and
    ``<sub> --config FILE`` is that subcommand's :meth:`Flags.parse` (the file's values over the defaults).

    ``parse`` returns ``(name, config)``.
    """

    prog: str
    commands: Mapping[str, Flags]
    description: str | None = None
    help: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def parse(self, argv: Sequence[str] | None = None):
        argv = sys.argv[1:] if argv is None else list(argv)
        if argv and argv[0] in self.commands:
            flags = self.commands[argv[0]]
            flags.refuse_repeats(argv[1:])
            if flags._config_option(argv[1:])[1] is not None:  # --config FILE: the subcommand's own layered parse
                return argv[0], flags.parse(argv[1:])
        classes = {name: flags.command() for name, flags in self.commands.items()}
        union = typing.Union[tuple(Annotated[cls, tyro.conf.subcommand(name, description=self.help.get(name))]
                                   for name, cls in classes.items())]
        parsed = _parse(union, argv, self.prog, description=self.description)
        name = next(n for n, cls in classes.items() if type(parsed) is cls)
        return name, self.commands[name].build(parsed)


def _tyro(target: Any, argv: Sequence[str], prog: str, default: Any = None, description: str | None = None):
    if default is None:
        target = functools.partial(target) if isinstance(target, type) else target
        return tyro.cli(target, args=list(argv), prog=prog, description=description,
                        config=(tyro.conf.FlagCreatePairsOff,))
    return tyro.cli(target, args=list(argv), prog=prog, default=default, description=description,
                    config=(tyro.conf.FlagCreatePairsOff,))


def _parse(target: Any, argv: list[str], prog: str, default: Any = None, description: str | None = None):
    """tyro's instance of ``target``; a rejected value is one line ``prog: error: ...`` on stderr, exit 2."""
    with contextlib.redirect_stderr(io.StringIO()):
        try:
            return _tyro(target, argv, prog, default, description)
        except SystemExit as err:
            if err.code in (0, None):
                raise
    # parse again with an unbounded width, so that the message is not wrapped, and keep its text
    captured, columns = io.StringIO(), os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100000"
    try:
        with contextlib.redirect_stderr(captured), contextlib.suppress(SystemExit):
            _tyro(target, argv, prog, default, description)
    finally:
        os.environ.pop("COLUMNS") if columns is None else os.environ.__setitem__("COLUMNS", columns)
    print(f"{prog}: error: {one_line(captured.getvalue())}", file=sys.stderr)
    raise SystemExit(2)


def _fail(prog: str, message: str):
    print(f"{prog}: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def _read_config(path: str) -> dict:
    """A config file's top-level table: TOML by suffix ``.toml``, YAML by ``.yaml`` / ``.yml``, JSON otherwise."""
    import json
    import tomllib

    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as err:
        raise ValueError(f"--config {path}: cannot read it ({err.strerror or err})") from None
    try:
        text = raw.decode("utf-8")
        if path.endswith(".toml"):
            data = tomllib.loads(text)
        elif path.endswith((".yaml", ".yml")):
            import yaml

            data = yaml.safe_load(text)
        else:
            data = json.loads(text)
    except Exception as err:  # noqa: BLE001 (each reader's syntax error, with its own line/column)
        raise ValueError(f"--config {path}: not a valid config file: {one_line(str(err)) or err}") from None
    if not isinstance(data, dict):
        raise ValueError(f"--config {path}: the top level must be a table of options, got {type(data).__name__}")
    return data


def _fits(value: Any, hint: Any) -> bool:
    """Whether a config file's (decoded) value has the field's type: ``int`` for ``float`` is fine, ``bool`` for
    ``int`` is not, ``None`` only for an optional field; tuples item by item."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return True
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        return any(_fits(value, a) for a in args)
    if origin is Literal:
        return value in args
    if hint is type(None):
        return value is None
    if origin is tuple:
        item = _tuple_item(hint)
        return isinstance(value, tuple) and (item is None or all(_fits(v, item) for v in value))
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if isinstance(hint, type):
        return isinstance(value, hint)
    return True


def _values(obj, cls: type | None = None) -> dict:
    return {f.name: getattr(obj, f.name) for f in dataclasses.fields(cls or obj)}
