"""The one checkpoint module: orbax save/restore of any pytree (parameters, optimiser state, NNX state) plus the
step counter, strict metadata checks, and numbered checkpoint folders for training runs.

Any pytree of arrays is stored: an ``nnx.State`` of a model, the state of an ``nnx.Optimizer``, a
``(params, opt_state, step)`` tuple of a pure train step. The tree is written as a nested dict of its key paths
(dict keys, attribute names, sequence indices as strings), so the files do not depend on Python classes, and it
is read back into the structure of an *abstract* target::

    abstract = nnx.state(nnx.eval_shape(lambda: Model(cfg, rngs=nnx.Rngs(0))))
    save(path, {"params": nnx.state(model)}, step=100)
    restored, step = restore(path, {"params": abstract})

Before reading any array, the checkpoint's metadata is compared with the target, and a missing or malformed
checkpoint raises :class:`CheckpointError` naming the path and every missing, unexpected or mis-shaped entry.
:func:`save_train_state` / :func:`restore_train_state` wrap this for a model and an optional ``nnx.Optimizer``
(restored in place with ``nnx.update``). :class:`CheckpointDir` keeps a run's numbered checkpoints
(``<dir>/<step>/``, the newest ``keep``; written by orbax's ``CheckpointManager``, in the background for the
training loop, ``asynchronous=True``; steps of the earlier synchronous layout are read as they are), restores the newest *intact* one (falling back past unreadable ones with
a warning; a checkpoint that is readable but of another structure is an error, never skipped) and is what the
training loop uses; a finished pre-training run exports its parameters alone with :func:`save` (``params/``).

What a checkpoint holds is what resuming needs and no more. Leaves a run never changes and re-creates from its
source when it starts (the frozen base weights under LoRA or ``--update freeze``, already in the ``--model``
folder) are *held*: :func:`save` with ``held=paths`` stores, in place of each, a 2-word checksum of its bits
(:func:`checksums`), and :func:`restore` takes their values from the (concrete) target, refusing when the
checksums differ (the source changed) or the target is abstract. :meth:`CheckpointDir.hold` names those paths for
a run's checkpoints (``<dir>/held.json``, written by ``runs/engine.train_lm`` from the trainable mask). A finished
run may keep less (:data:`FINAL_CHECKPOINTS`, ``--final-checkpoint``): :meth:`CheckpointDir.finish` deletes the
numbered checkpoints and leaves ``<dir>/finished.json``, after which a full restore (a resume) is refused with one
line naming the folder, while reading the parameters (``under=("params",)``) finds no checkpoint and the run
folder falls back to its ``params/`` export (``runs/folder.RunFolder.checkpoint_params``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pathlib
import shutil
import warnings
from typing import Any

import flax.nnx as nnx
import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp

from cfka_jax import jsonio
from cfka_jax.trees import flatten_mapping, nest

Path = tuple[str, ...]

FINAL_CHECKPOINTS = ("full", "params", "none")
"""What a finished run keeps (``--final-checkpoint``): ``full`` its numbered checkpoints (the run can be resumed or
extended), ``params`` the final parameters alone (``<run>/params/``, trained leaves only where some are held),
``none`` nothing (the metrics and ``final.json`` stay)."""


class CheckpointError(ValueError):
    """A checkpoint is missing, unreadable or does not match the target structure."""


class CheckpointUnreadable(CheckpointError):
    """A checkpoint folder that cannot be read (truncated, corrupted, not a checkpoint)."""


def _part(key: Any) -> str:
    for attr in ("key", "name", "idx"):
        if hasattr(key, attr):
            return str(getattr(key, attr))
    return str(key)


def _flatten(tree: Any) -> tuple[dict[Path, Any], Any, list[Path]]:
    leaves, treedef = jax.tree_util.tree_flatten_with_path(tree)
    flat = {tuple(_part(k) for k in path): leaf for path, leaf in leaves}
    if len(flat) != len(leaves):
        raise CheckpointError("two leaves of the tree map to the same checkpoint key")
    return flat, treedef, [tuple(_part(k) for k in path) for path, _ in leaves]


def _default_sharding() -> jax.sharding.Sharding:
    return jax.sharding.SingleDeviceSharding(jax.devices()[0])


def _abstract(leaf: Any) -> jax.ShapeDtypeStruct:
    sharding = getattr(leaf, "sharding", None) or _default_sharding()
    dtype = leaf.dtype if hasattr(leaf, "dtype") else np.asarray(leaf).dtype
    return jax.ShapeDtypeStruct(np.shape(leaf), dtype, sharding=sharding)


def _is_key(leaf: Any) -> bool:
    return hasattr(leaf, "dtype") and jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key)


def _key_impl(leaf: Any):
    """The PRNG implementation of a typed key or of its abstract value (``nnx.eval_shape`` gives the latter)."""
    if isinstance(leaf, jax.ShapeDtypeStruct):
        return leaf.dtype._impl  # no public accessor for abstract keys
    return jax.random.key_impl(leaf)


def _storable(leaf: Any) -> Any:
    """Typed PRNG keys (``nnx.Rngs`` state) are stored as their raw key data."""
    return jax.random.key_data(leaf) if _is_key(leaf) else leaf


def frozen_paths(params: Any, mask: Any, prefix: Path = ()) -> tuple[Path, ...]:
    """The key paths of the leaves of ``params`` (as checkpoints name them, after ``prefix``) whose boolean in
    ``mask`` (a trainable mask, one bool per leaf in the same order) is False: the frozen leaves."""
    _, _, order = _flatten(params)
    return tuple(prefix + p for p, m in zip(order, jax.tree.leaves(mask), strict=True) if not np.any(m))


def _words(x: jax.Array) -> jax.Array:
    """The bits of ``x`` as a flat uint32 vector (8-byte items as two words, smaller items zero-extended)."""
    if x.dtype == jnp.bool_:
        return x.astype(jnp.uint32).ravel()
    size = np.dtype(x.dtype).itemsize
    if size in (4, 8):
        return jax.lax.bitcast_convert_type(x, jnp.uint32).ravel()
    unsigned = {1: jnp.uint8, 2: jnp.uint16}[size]
    return jax.lax.bitcast_convert_type(x, unsigned).astype(jnp.uint32).ravel()


@jax.jit
def _checksums(leaves: list) -> list:
    out = []
    for x in leaves:
        w = _words(x)
        i = jax.lax.iota(jnp.uint32, w.size) + jnp.uint32(1)
        out.append(jnp.stack([jnp.sum(w, dtype=jnp.uint32), jnp.sum(w * i, dtype=jnp.uint32)]))
    return out


def checksums(leaves: list) -> list[np.ndarray]:
    """Per leaf, ``[Σ w_i, Σ i·w_i] mod 2³²`` over its bit words w_1..w_n (uint32[2]): any change of one value, or
    a swap of two, changes it (not a cryptographic hash; it guards against resuming with another source's
    frozen weights). Exact integer sums, so the same on any device or sharding."""
    return [np.asarray(c) for c in _checksums([_storable(x) for x in leaves])] if leaves else []


def save(directory: str | os.PathLike, tree: Any, *, step: int, force: bool = False,
         held: tuple[Path, ...] = (), compress: bool = False) -> pathlib.Path:
    """Write ``tree`` (any pytree of arrays) and ``step`` to ``directory`` (created; must not exist unless
    ``force``). Returns the absolute path. Blocks until the write has finished.

    ``held``: key paths of leaves *not* stored (module docstring); their checksums are stored instead, and
    :func:`restore` takes them from its target.

    ``compress``: zstd-compress the array files. Off by default: a compressed write stages the compressed copy
    of every array in memory (measured: +1.85 GiB of peak RSS for a 2 GiB tree, against +0.01 GiB uncompressed,
    and 2.5x the time), and a trained float32 state compresses by ~10 % only (``bench/memory.py --checkpoints``).
    :func:`restore` reads either."""
    path = pathlib.Path(directory).absolute()
    item = _item(path, tree, step, held)
    handler = ocp.PyTreeCheckpointHandler(use_compression=compress)
    with ocp.Checkpointer(handler) as ckptr:  # synchronous, closed on exit: no thread or event loop outlives it
        ckptr.save(path, args=ocp.args.PyTreeSave(item), force=force)
    return path


def _item(path: pathlib.Path, tree: Any, step: int, held: tuple[Path, ...]) -> dict:
    """What a checkpoint stores: ``{"state": tree minus held leaves, "step", "held": their checksums}``."""
    flat, _, _ = _flatten(tree)
    held = tuple(tuple(p) for p in held)
    unknown = sorted(".".join(p) for p in held if p not in flat)
    if unknown:
        raise CheckpointError(f"checkpoint {path}: held paths that are not leaves of the tree: {unknown[:5]}")
    item = {"state": nest({p: _storable(v) for p, v in flat.items() if p not in set(held)}),
            "step": jnp.asarray(step, jnp.int32)}
    if held:
        item["held"] = nest(dict(zip(held, checksums([flat[p] for p in held]), strict=True)))
    return item


ITEM = "default"
"""The item folder inside a :class:`CheckpointDir` step written by orbax's ``CheckpointManager``
(``<dir>/<step>/default/``); checkpoints written by :func:`save` (and by the synchronous ``CheckpointDir`` of
earlier versions) hold the item directly in the step folder, and :func:`restore` reads both."""


def item_path(directory: str | os.PathLike) -> pathlib.Path:
    """The folder holding a checkpoint's arrays: ``directory/default`` when a ``CheckpointManager`` wrote it,
    else ``directory`` itself (:func:`save`, or a step of the synchronous layout)."""
    path = pathlib.Path(directory).absolute()
    return path / ITEM if (path / ITEM).is_dir() else path


def _check(path: pathlib.Path, stored: dict[Path, Any], target: dict[Path, jax.ShapeDtypeStruct],
           partial: bool = False, held: frozenset = frozenset()) -> None:
    missing = sorted(".".join(p) for p in target if p not in stored and p not in held)
    unexpected = [] if partial else sorted(".".join(p) for p in (*stored, *held) if p not in target)
    mismatched = [
        f"{'.'.join(p)}: stored {tuple(stored[p].shape)} {stored[p].dtype}, expected {t.shape} {t.dtype}"
        for p, t in target.items()
        if p in stored and (tuple(stored[p].shape) != tuple(t.shape) or np.dtype(stored[p].dtype) != np.dtype(t.dtype))
    ]
    if missing or unexpected or mismatched:
        lines = [f"checkpoint {path} does not match the target state:"]
        for title, items in (("missing", missing), ("unexpected", unexpected), ("shape/dtype mismatches", mismatched)):
            if items:
                lines += [f"{title} ({len(items)}):"] + [f"  {item}" for item in items]
        raise CheckpointError("\n".join(lines))


class _TidyLoop(asyncio.SelectorEventLoop):
    """An event loop that, when closed, first lets its pending tasks finish and finalises its async generators
    (``asyncio.run`` cancels the tasks and finalises the generators; orbax's ``asyncio_utils.run_sync`` does
    neither).

    Orbax reads every array of a checkpoint concurrently (``asyncio.gather``) in a fresh loop that it closes when
    the gather returns. When one read fails (a damaged checkpoint), the sibling reads are left pending inside
    ``async with limits.reserved_bytes(...)``, an async generator whose finaliser is bound to the closed loop; when
    it is garbage-collected, the finaliser's ``call_soon_threadsafe`` raises "RuntimeError: Event loop is closed",
    reported as an unraisable exception long after the error was handled. Closed this way, the reads still
    running when the first one failed finish (their errors dropped: the first is raised), and the generators'
    ``finally`` blocks run while the loop is open.
    """

    def close(self) -> None:
        if not self.is_closed() and not self.is_running():
            pending = [t for t in asyncio.all_tasks(self) if not t.done()]
            if pending:  # awaited, not cancelled: the reads they wait on (tensorstore futures) end while we listen
                self.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            self.run_until_complete(self.shutdown_asyncgens())
        super().close()


class _TidyPolicy(asyncio.DefaultEventLoopPolicy):
    def new_event_loop(self) -> asyncio.AbstractEventLoop:
        return _TidyLoop()


@contextlib.contextmanager
def _tidy_event_loops():
    """Orbax's loops created inside are :class:`_TidyLoop` (the previous event loop policy is put back after)."""
    previous = asyncio.get_event_loop_policy()
    asyncio.set_event_loop_policy(_TidyPolicy())
    try:
        yield
    finally:
        asyncio.set_event_loop_policy(previous)


def restore(directory: str | os.PathLike, abstract: Any, *, under: tuple[str, ...] = ()) -> tuple[Any, int]:
    """Read a checkpoint written by :func:`save` into the structure of ``abstract``.

    Args:
        abstract: the target pytree; leaves may be ``jax.ShapeDtypeStruct`` (``nnx.eval_shape``) or arrays.
        under: read only the subtree at this key path (e.g. ``("params",)`` of a saved ``TrainState``); the rest
            of the checkpoint is not read.

    Returns:
        ``(tree, step)`` with ``tree`` structured like ``abstract``.

    Leaves the checkpoint holds (``save(..., held=...)``) are taken from ``abstract``, which must then hold their
    values, equal (by checksum) to those the checkpoint was written with.

    Raises:
        CheckpointError: no checkpoint at the path, an unreadable one, or entries that are missing, unexpected
            or of the wrong shape/dtype (all listed); held leaves given abstractly or with other values.
    """
    path = pathlib.Path(directory).absolute()
    if not path.is_dir():
        raise CheckpointUnreadable(f"no checkpoint at {path}")
    data = item_path(path)  # errors name the step folder the user sees; the arrays may be in <step>/default/
    try:
        with _tidy_event_loops():
            handler = ocp.PyTreeCheckpointHandler()
            try:
                meta = handler.metadata(data).tree
            finally:
                handler.close()
        stored = flatten_mapping(meta["state"])
        stored_held = frozenset(flatten_mapping(meta["held"])) if "held" in meta else frozenset()
    except Exception as e:  # orbax raises several types for unreadable folders
        raise CheckpointUnreadable(f"checkpoint {path} is malformed or unreadable: {_first_line(e)}") from e
    flat, treedef, order = _flatten(abstract)
    target = {under + p: _abstract(jax.eval_shape(_storable, leaf) if _is_key(leaf) else leaf)
              for p, leaf in flat.items()}
    held = sorted(q for q in target if q in stored_held and q not in stored)
    _check(path, stored, target, partial=bool(under), held=stored_held if not under else frozenset(held))
    given = {q: flat[q[len(under):]] for q in held}
    abstract_held = [".".join(q) for q, v in given.items() if isinstance(v, jax.ShapeDtypeStruct)]
    if abstract_held:
        raise CheckpointError(f"checkpoint {path} does not store {len(abstract_held)} frozen leaves (held by the "
                              f"run's source model, e.g. {abstract_held[0]}); restore it into a state that holds "
                              f"their values, not an abstract one")
    word2 = jax.ShapeDtypeStruct((2,), jnp.uint32, sharding=_default_sharding())
    item = {"state": nest({q: t for q, t in target.items() if q not in given}),
            "step": jax.ShapeDtypeStruct((), jnp.int32, sharding=_default_sharding())}
    if held:
        item["held"] = nest({q: word2 for q in held})
    try:
        with _tidy_event_loops():  # a failed read leaves no pending task or async generator behind
            restored = _read(data, item, partial=bool(under))
    except Exception as e:  # orbax/tensorstore raise several types for damaged array files
        raise CheckpointUnreadable(f"checkpoint {path} could not be read: {_first_line(e)}") from e
    if held:
        want = flatten_mapping(restored["held"])
        got = dict(zip(held, checksums([given[q] for q in held]), strict=True))
        changed = [".".join(q) for q in held if not np.array_equal(np.asarray(want[q]), got[q])]
        if changed:
            raise CheckpointError(f"checkpoint {path}: {len(changed)} frozen leaves it does not store (held by the "
                                  f"run's source model, e.g. {changed[0]}) differ from the values given for them; "
                                  f"the source model changed since the checkpoint was written")
    values = {**flatten_mapping(restored["state"]), **given}
    leaves = [values[under + p] if under + p in given else
              jax.random.wrap_key_data(values[under + p], impl=_key_impl(flat[p])) if _is_key(flat[p])
              else values[under + p] for p in order]
    return jax.tree_util.tree_unflatten(treedef, leaves), int(restored["step"])


def _first_line(e: BaseException) -> str:
    """``"<Type>: <first line of the message>"``: tensorstore's messages run to dozens of lines (the whole spec)."""
    lines = str(e).strip().splitlines()
    return f"{type(e).__name__}: {lines[0] if lines else ''}"[:400]


def _read(path: pathlib.Path, item: dict, partial: bool) -> dict:
    """Every checkpointer is closed when done (``with``), so no orbax thread or event loop outlives the call."""
    if not partial:
        with ocp.StandardCheckpointer() as ckptr:
            return ckptr.restore(path, item)
    args = ocp.args.PyTreeRestore(item=item, restore_args=ocp.checkpoint_utils.construct_restore_args(item),
                                  partial_restore=True)
    with ocp.Checkpointer(ocp.PyTreeCheckpointHandler()) as ckptr:
        return ckptr.restore(path, args=args)


# ------------------------------------------------------------------------------------------- model + optimizer


def save_train_state(
    directory: str | os.PathLike, model: nnx.Module, optimizer: nnx.Optimizer | None = None, *, step: int,
    force: bool = False,
) -> pathlib.Path:
    """Save ``nnx.state(model)`` (all variables: parameters, LoRA adapters, RNG counters) and, if given,
    ``nnx.state(optimizer)`` with ``step``."""
    tree = {"model": nnx.state(model)}
    if optimizer is not None:
        tree["optimizer"] = nnx.state(optimizer)
    return save(directory, tree, step=step, force=force)


def restore_train_state(
    directory: str | os.PathLike, model: nnx.Module, optimizer: nnx.Optimizer | None = None
) -> int:
    """Restore a :func:`save_train_state` checkpoint into ``model`` (and ``optimizer``) in place.

    ``model``/``optimizer`` may be abstract (built under ``nnx.eval_shape``); only their structure is used as the
    target. Returns the saved step.
    """
    abstract = {"model": nnx.state(model)}
    if optimizer is not None:
        abstract["optimizer"] = nnx.state(optimizer)
    tree, step = restore(directory, abstract)
    nnx.update(model, tree["model"])
    if optimizer is not None:
        nnx.update(optimizer, tree["optimizer"])
    return step


# ------------------------------------------------------------------------------------------ numbered checkpoints


class CheckpointDir:
    """A training run's checkpoints: ``<directory>/<step>/``, written by an orbax ``CheckpointManager``
    (``<step>/default/``; retention: the newest ``keep``, ``max_to_keep``). A write goes to a temporary folder that
    orbax renames when complete, so a killed write leaves no numbered folder behind.

    ``asynchronous=True``: :meth:`save` returns once the arrays are copied off the device (the caller may donate
    or overwrite them) and the files are written by a background thread; :meth:`wait` blocks until the last save
    is on disk, and :meth:`close` waits and stops the manager (the training loop calls it when it returns or
    stops). Otherwise every :meth:`save` returns with the checkpoint complete.

    Steps written by the synchronous layout of earlier versions (the item directly in ``<step>/``, :func:`save`)
    are restored as they are (:func:`item_path`), and pruned like the others."""

    HELD, FINISHED = "held.json", "finished.json"

    def __init__(self, directory: str | os.PathLike, keep: int = 2, *, asynchronous: bool = False):
        if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
            raise ValueError(f"--keep-checkpoints must be an integer >= 1, got {keep!r}")
        self.directory, self.keep, self.asynchronous = pathlib.Path(directory).absolute(), keep, asynchronous
        self._manager: ocp.CheckpointManager | None = None

    def _mngr(self) -> ocp.CheckpointManager:
        if self._manager is None:
            options = ocp.CheckpointManagerOptions(max_to_keep=self.keep, create=True,
                                                   enable_async_checkpointing=self.asynchronous)
            self._manager = ocp.CheckpointManager(self.directory, options=options,
                                                  item_handlers=ocp.PyTreeCheckpointHandler(use_compression=False))
        return self._manager

    def wait(self) -> None:
        """Block until the last :meth:`save` is complete on disk (at once when none is running)."""
        if self._manager is not None:
            self._manager.wait_until_finished()

    def close(self) -> None:
        """Wait for the last save, then release the manager (its threads); a later :meth:`save` opens a new one."""
        if self._manager is not None:
            self._manager.wait_until_finished()
            self._manager.close()
            self._manager = None

    def hold(self, paths: tuple[Path, ...]) -> None:
        """Leave the leaves at ``paths`` out of this run's checkpoints from now on (``<dir>/held.json``; module
        docstring); ``()`` removes the file. Checkpoints already written keep what they hold."""
        file = self.directory / self.HELD
        if jax.process_index() != 0 or (not paths and not file.exists()):
            return
        if not paths:
            file.unlink()
            return
        if self.held() != tuple(tuple(p) for p in paths):
            self.directory.mkdir(parents=True, exist_ok=True)
            jsonio.write_json_atomic(file, [list(p) for p in paths])

    def held(self) -> tuple[Path, ...]:
        """The key paths :meth:`hold` named (``()`` when none)."""
        file = self.directory / self.HELD
        if not file.exists():
            return ()
        try:
            return tuple(tuple(p) for p in jsonio.read_json(file))
        except (ValueError, TypeError) as err:
            raise CheckpointError(f"{file}: not a list of key paths ({err})") from None

    def finished(self) -> dict | None:
        """``{"step", "final_checkpoint"}`` left by :meth:`finish`, or None."""
        file = self.directory / self.FINISHED
        if not file.exists():
            return None
        try:
            return jsonio.read_json_object(file, "a JSON object")
        except ValueError as err:
            raise CheckpointError(str(err)) from None

    def finish(self, keep: str, step: int) -> None:
        """A finished run keeps ``keep`` (:data:`FINAL_CHECKPOINTS`): for ``params`` / ``none`` the numbered
        checkpoints are deleted after ``finished.json`` records it (the ``params/`` export is the caller's)."""
        if keep not in FINAL_CHECKPOINTS:
            raise ValueError(f"--final-checkpoint must be one of {FINAL_CHECKPOINTS}, got {keep!r}")
        if keep == "full":
            return
        if jax.process_index() == 0:
            self.directory.mkdir(parents=True, exist_ok=True)
            jsonio.write_json_atomic(self.directory / self.FINISHED, {"step": int(step), "final_checkpoint": keep})
        self.close()
        for old in self.steps():
            shutil.rmtree(self.directory / str(old), ignore_errors=True)

    def steps(self) -> list[int]:
        """Steps of the complete checkpoints, ascending."""
        if not self.directory.is_dir():
            return []
        return sorted(int(p.name) for p in self.directory.iterdir() if p.is_dir() and p.name.isdigit())

    def latest_step(self) -> int | None:
        steps = self.steps()
        return steps[-1] if steps else None

    def save(self, step: int, tree: Any) -> pathlib.Path:
        """Write ``tree`` at ``step`` (replacing an existing checkpoint of that step; the newest ``keep`` are
        kept). Returns the step folder; with ``asynchronous`` it is complete only after :meth:`wait`."""
        path = self.directory / str(step)
        item = _item(path, tree, step, self.held())
        manager = self._mngr()
        manager.wait_until_finished()  # one write at a time; the step being replaced is not being written
        if path.exists():  # e.g. a damaged checkpoint the run fell back past; the manager deletes it on every host
            manager.reload()
            manager.delete(step)
        manager.save(step, args=ocp.args.PyTreeSave(item), force=True)
        if not self.asynchronous:
            manager.wait_until_finished()
        return path

    def restore_latest(self, abstract: Any, *, under: tuple[str, ...] = ()) -> tuple[Any, int] | None:
        """``(tree, step)`` of the newest intact checkpoint (its subtree at ``under``), or None when there is none.

        An unreadable checkpoint is skipped with a warning naming it; if none is intact, one error lists them.

        Raises:
          CheckpointError: a readable checkpoint of another structure (named, with every difference), or every
            checkpoint unreadable; a full restore (no ``under``) of a run that :meth:`finish` left without one.
        """
        done = self.finished()
        if done is not None and not under:
            kept = "its final parameters only (params/)" if done.get("final_checkpoint") == "params" else "nothing"
            raise CheckpointError(f"{self.directory}: the run finished at step {done.get('step')} with "
                                  f"--final-checkpoint {done.get('final_checkpoint')} and kept {kept}, no "
                                  f"resumable state; train into another --out")
        steps, damaged = self.steps(), []
        for step in reversed(steps):
            try:
                tree, _ = restore(self.directory / str(step), abstract, under=under)
            except CheckpointUnreadable as err:
                damaged.append(str(err).splitlines()[0])
                continue
            if damaged:
                warnings.warn(f"skipped unreadable checkpoint(s) {[int(s) for s in steps if s > step]} in "
                              f"{self.directory}, resuming from step {step} ({'; '.join(damaged)})", stacklevel=2)
            return tree, step
        if damaged:
            raise CheckpointError(f"no intact checkpoint in {self.directory}: " + "; ".join(damaged))
        return None
