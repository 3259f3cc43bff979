"""Strict JAX settings for the test suite: rank/dtype promotion raise; two fake CPU devices. A watchdog turns a
hung test into a failure that names it."""

import faulthandler
import os
import signal
import sys
import threading
import traceback

import jax
import pytest

jax.config.update("jax_numpy_rank_promotion", "raise")
jax.config.update("jax_numpy_dtype_promotion", "strict")
jax.config.update("jax_num_cpu_devices", 2)


#: Seconds one test may run (setup, call and teardown of its function-scoped fixtures; six times that when marked
#: slow) before the watchdog fails it. The slowest default test takes about a minute on two cores.
#: ``CFKA_TEST_WATCHDOG_S`` changes the limit; ``0`` switches the watchdog off (a debugger).
WATCHDOG_S = float(os.environ.get("CFKA_TEST_WATCHDOG_S", "600"))
#: Seconds after that at which a test still stuck (in C code that a signal cannot interrupt) ends its process.
HARD_GRACE_S = 60.0


def _stacks() -> str:
    return "\n".join(f"--- thread {ident}\n" + "".join(traceback.format_stack(frame, limit=20))
                     for ident, frame in sys._current_frames().items())


@pytest.fixture(autouse=True)
def _watchdog(request):
    """A test that hangs (a deadlocked thread, a child process that never answers) would hold the whole run until
    CI's deadline and print nothing. Past the limit, SIGALRM fails the test with every thread's stack in its report
    and the run goes on; a test stuck where no signal reaches it dumps the stacks to stderr and ends its process
    :data:`HARD_GRACE_S` later (under xdist the worker is reported as crashed in this test and replaced)."""
    limit = WATCHDOG_S * (6 if request.node.get_closest_marker("slow") is not None else 1)
    if limit <= 0 or threading.current_thread() is not threading.main_thread():
        yield
        return

    def hung(signum, frame):
        pytest.fail(f"watchdog: the test ran past {limit:.0f} s (CFKA_TEST_WATCHDOG_S); every thread's stack:\n"
                    f"{_stacks()}", pytrace=False)

    previous = signal.signal(signal.SIGALRM, hung)
    signal.setitimer(signal.ITIMER_REAL, limit)
    faulthandler.dump_traceback_later(limit + HARD_GRACE_S, exit=True)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        faulthandler.cancel_dump_traceback_later()


@pytest.fixture
def key():
    return jax.random.key(0)


@pytest.fixture
def x64():
    """Float64 for the duration of one theory test (never on import, never globally)."""
    with jax.enable_x64(True):
        yield


@pytest.fixture(autouse=True)
def _no_global_x64_leak():
    """Float64 is switched on only inside a check (the ``x64`` fixture); a test that leaves it on globally fails."""
    yield
    assert not jax.config.read("jax_enable_x64"), "this test left jax_enable_x64 on for the rest of the run"
