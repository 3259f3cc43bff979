"""``--profile START:STOP``: a ``jax.profiler`` trace of a window of training steps, written into the run folder.

    window = parse_profile("10:15")        # (10, 15): the steps that take the run from 10 to 15 done steps
    tracer = StepTracer(window, run_folder / "profile")
    tracer.before(t)                       # before dispatching step t (0-based): starts the trace at t == START
    tracer.after(t + 1, state)             # after it: at STOP done steps waits for the state, stops the trace
    tracer.close()                         # a run that ends or stops inside the window still closes its trace

The trace (``profile/plugins/profile/<time>/*.xplane.pb``, with a Perfetto ``*.trace.json.gz``) opens in
TensorBoard's profile plugin or in Perfetto / XProf. STOP − START steps are traced; the first traced step waits
for the steps before it to finish, so the window shows those steps alone, not their queued predecessors. A
resumed run that starts inside the window traces what is left of it.
"""

from __future__ import annotations

import pathlib
import re

import jax

PROFILE_SYNTAX = "START:STOP (e.g. 10:15: the 5 steps after step 10; 0 <= START < STOP)"


def parse_profile(text: str | None) -> tuple[int, int] | None:
    """``"START:STOP"`` as ``(START, STOP)``, or None for None.

    Raises:
      ValueError: naming ``--profile`` and the syntax, for anything else.
    """
    if text is None:
        return None
    match = re.fullmatch(r"\s*(\d+)\s*:\s*(\d+)\s*", str(text))
    if match is None or int(match.group(1)) >= int(match.group(2)):
        raise ValueError(f"--profile must be {PROFILE_SYNTAX}, got {text!r}")
    return int(match.group(1)), int(match.group(2))


class StepTracer:
    """Starts and stops one ``jax.profiler`` trace around a window of steps (module docstring)."""

    def __init__(self, window: tuple[int, int] | None, directory: pathlib.Path):
        self.window, self.directory, self.active = window, pathlib.Path(directory), False

    def before(self, t: int, state) -> None:
        """Before dispatching step ``t``: start the trace when ``t`` is the window's first step (or the first step
        of a resumed run inside it)."""
        if self.window is None or self.active or not self.window[0] <= t < self.window[1]:
            return
        jax.block_until_ready(state)  # the queued steps before the window finish outside it
        self.directory.mkdir(parents=True, exist_ok=True)
        jax.profiler.start_trace(str(self.directory))
        self.active = True

    def after(self, done: int, state) -> None:
        """After a step: stop the trace once ``done`` reaches the window's end."""
        if self.active and done >= self.window[1]:
            jax.block_until_ready(state)
            self.close()

    def close(self) -> None:
        if self.active:
            self.active = False
            jax.profiler.stop_trace()
