"""Measure the Python original's bind and read, beside which sessionwire's
README compares Bind and Getenv, on the machine perftables runs on.

The original module (../shared/seed/session_context.py.txt in the project's
layout) lost its newlines; the parts a bind and a read run are written out
below as it has them: the ContextVar per variable, set_session_vars and
get_session_env. set_session_vars imports agent.runtime_cwd, a module of the
gateway this project does not have; a stand-in that keeps the cwd in a
ContextVar of its own is put in sys.modules, so the import costs what it costs
the gateway (a module already loaded) and not a failed search of sys.path.

It prints Go benchmark lines, which perftables reads as it reads a test
binary's:

    BenchmarkPythonOriginal/set_session_vars  <n>  <ns> ns/op  <cpu> cpu-ns/op

    python3 internal/cmd/perftables/python/original_bench.py -benchtime 0.2
    python3 internal/cmd/perftables/python/original_bench.py -count 1

-count runs each benchmark a fixed number of times, as go test's -benchtime Nx
does (perftables passes it for that).
"""

import argparse
import contextvars
import os
import sys
import time
import types
from contextvars import ContextVar
from typing import Any

# --- The stand-in for the gateway's agent.runtime_cwd -----------------------
_CWD: ContextVar = ContextVar("HERMES_SESSION_CWD", default="")


def _set_session_cwd(cwd: str) -> None:
    _CWD.set(cwd)


def _clear_session_cwd_impl() -> None:
    _CWD.set("")


_agent = types.ModuleType("agent")
_runtime_cwd = types.ModuleType("agent.runtime_cwd")
_runtime_cwd.set_session_cwd = _set_session_cwd
_runtime_cwd.clear_session_cwd = _clear_session_cwd_impl
_agent.runtime_cwd = _runtime_cwd
sys.modules.setdefault("agent", _agent)
sys.modules.setdefault("agent.runtime_cwd", _runtime_cwd)

# --- The original, as it has them --------------------------------------------
_UNSET: Any = object()
_session_context_engaged: bool = False


def _var(name: str) -> ContextVar:
    return ContextVar(name, default=_UNSET)


_SESSION_PLATFORM = _var("HERMES_SESSION_PLATFORM")
_SESSION_SOURCE = _var("HERMES_SESSION_SOURCE")
_SESSION_CHAT_ID = _var("HERMES_SESSION_CHAT_ID")
_SESSION_CHAT_TYPE = _var("HERMES_SESSION_CHAT_TYPE")
_SESSION_CHAT_NAME = _var("HERMES_SESSION_CHAT_NAME")
_SESSION_THREAD_ID = _var("HERMES_SESSION_THREAD_ID")
_SESSION_USER_ID = _var("HERMES_SESSION_USER_ID")
_SESSION_USER_ID_ALT = _var("HERMES_SESSION_USER_ID_ALT")
_SESSION_USER_NAME = _var("HERMES_SESSION_USER_NAME")
_SESSION_SCOPE_ID = _var("HERMES_SESSION_SCOPE_ID")
_SESSION_KEY = _var("HERMES_SESSION_KEY")
_SESSION_ID = _var("HERMES_SESSION_ID")
_SESSION_UI_SESSION_ID = _var("HERMES_UI_SESSION_ID")
_SESSION_MESSAGE_ID = _var("HERMES_SESSION_MESSAGE_ID")
_SESSION_PROFILE = _var("HERMES_SESSION_PROFILE")
_BROWSER_CONTROL_PRINCIPAL = _var("HERMES_BROWSER_CONTROL_PRINCIPAL")
_BROWSER_CONTROL_TRANSPORT_FAMILY = _var("HERMES_BROWSER_CONTROL_TRANSPORT_FAMILY")
_CRON_SESSION = _var("HERMES_CRON_SESSION")
_SESSION_ASYNC_DELIVERY = _var("HERMES_SESSION_ASYNC_DELIVERY")
_CRON_AUTO_DELIVER_PLATFORM = _var("HERMES_CRON_AUTO_DELIVER_PLATFORM")
_CRON_AUTO_DELIVER_CHAT_ID = _var("HERMES_CRON_AUTO_DELIVER_CHAT_ID")
_CRON_AUTO_DELIVER_THREAD_ID = _var("HERMES_CRON_AUTO_DELIVER_THREAD_ID")

_SESSION_VARS = (
    _SESSION_PLATFORM,
    _SESSION_SOURCE,
    _SESSION_CHAT_ID,
    _SESSION_CHAT_TYPE,
    _SESSION_CHAT_NAME,
    _SESSION_THREAD_ID,
    _SESSION_USER_ID,
    _SESSION_USER_ID_ALT,
    _SESSION_USER_NAME,
    _SESSION_SCOPE_ID,
    _SESSION_KEY,
    _SESSION_ID,
    _SESSION_UI_SESSION_ID,
    _SESSION_MESSAGE_ID,
    _SESSION_PROFILE,
    _BROWSER_CONTROL_PRINCIPAL,
    _BROWSER_CONTROL_TRANSPORT_FAMILY,
    _CRON_SESSION,
)

_VAR_MAP = {
    var.name: var
    for var in (
        *_SESSION_VARS,
        _CRON_AUTO_DELIVER_PLATFORM,
        _CRON_AUTO_DELIVER_CHAT_ID,
        _CRON_AUTO_DELIVER_THREAD_ID,
    )
}


def set_session_vars(
    platform: str = "",
    source: str = "",
    chat_id: str = "",
    chat_type: str = "",
    chat_name: str = "",
    thread_id: str = "",
    user_id: str = "",
    user_id_alt: str = "",
    user_name: str = "",
    scope_id: str = "",
    session_key: str = "",
    session_id: str = "",
    message_id: str = "",
    profile: str = "",
    browser_control_principal: str = "",
    browser_control_transport_family: str = "",
    cwd: str = "",
    async_delivery: bool = True,
    ui_session_id: str = "",
    cron_session: Any = _UNSET,
) -> list:
    global _session_context_engaged
    _session_context_engaged = True
    values = (
        platform,
        source,
        chat_id,
        chat_type,
        chat_name,
        thread_id,
        user_id,
        user_id_alt,
        user_name,
        scope_id,
        session_key,
        session_id,
        ui_session_id,
        message_id,
        profile,
        browser_control_principal,
        browser_control_transport_family,
        cron_session,
    )
    tokens = [var.set(value) for var, value in zip(_SESSION_VARS, values)]
    tokens.append(_SESSION_ASYNC_DELIVERY.set(bool(async_delivery)))
    try:
        from agent.runtime_cwd import set_session_cwd

        set_session_cwd(cwd)
    except Exception:
        pass
    return tokens


def get_session_env(name: str, default: str = "") -> str:
    import os

    var = _VAR_MAP.get(name)
    if var is not None and (value := var.get()) is not _UNSET:
        return value
    return os.getenv(name, default)


# --- The measurements --------------------------------------------------------

# The session otelsession's benchmarks bind (fullSession in
# otelsession/bench_test.go): every field set.
SESSION = dict(
    platform="telegram",
    source="gateway",
    chat_id="-1001234567890",
    chat_type="supergroup",
    chat_name="Release planning",
    thread_id="4242",
    user_id="12345678",
    user_id_alt="alt-12345678",
    user_name="Ada Lovelace",
    scope_id="guild-77",
    session_key="agent:main:telegram:group:-1001234567890:4242",
    session_id="sess-0001",
    message_id="987654",
    profile="default",
    browser_control_principal="principal-1",
    browser_control_transport_family="cdp",
    cwd="/srv/workspaces/release",
    async_delivery=True,
    ui_session_id="ui-1",
    cron_session="",
)


def bench_bind(n: int) -> None:
    s = SESSION
    for _ in range(n):
        set_session_vars(**s)


# LIVE_SESSIONS is how many conversations' sessions the "beside a live heap"
# benchmark keeps alive: as many as sessionwire's bind cache holds by default
# (512), each a dict of the session with values of its own, about 2.2 MiB in
# all (the script reports what tracemalloc counted as live-B), what the Go row
# beside the full bind cache runs beside.
LIVE_SESSIONS = 512


def live_sessions() -> tuple[list, int]:
    """Builds LIVE_SESSIONS sessions whose every value is a string of its
    own, as a gateway holds its conversations; returns them and the bytes
    tracemalloc saw allocated for them."""
    import tracemalloc

    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    kept = []
    for i in range(LIVE_SESSIONS):
        d = {k: (v + f"-{i}" if isinstance(v, str) else v) for k, v in SESSION.items()}
        # A conversation's state beside its session: its recent message ids
        # and a token list as set_session_vars returns, so that the heap holds
        # containers the cyclic collector tracks, as a gateway's does.
        d["history"] = [f"{i}-{j}" for j in range(16)]
        d["tokens"] = set_session_vars(**SESSION)
        kept.append(d)
    live = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    return kept, live


_VALUES = tuple(SESSION[k] for k in (
    "platform", "source", "chat_id", "chat_type", "chat_name", "thread_id", "user_id",
    "user_id_alt", "user_name", "scope_id", "session_key", "session_id", "ui_session_id",
    "message_id", "profile", "browser_control_principal", "browser_control_transport_family",
    "cron_session",
))


def bench_sets_alone(n: int) -> None:
    # The 19 ContextVar.set calls of set_session_vars and nothing else: no
    # call, no tokens kept, no cwd. The floor of any bind through ContextVars.
    values = _VALUES
    for _ in range(n):
        for var, value in zip(_SESSION_VARS, values):
            var.set(value)
        _SESSION_ASYNC_DELIVERY.set(True)


def bench_get_session_env(n: int) -> None:
    set_session_vars(**SESSION)
    for _ in range(n):
        get_session_env("HERMES_SESSION_THREAD_ID", "")


# Each benchmark's name, function, and whether it runs beside LIVE_SESSIONS
# sessions kept alive (built just before it, after the others have run).
BENCHMARKS = (
    ("set_session_vars", bench_bind, False),
    ("19_ContextVar_set_alone", bench_sets_alone, False),
    ("get_session_env", bench_get_session_env, False),
    ("set_session_vars_beside_live_heap", bench_bind, True),
)


def run(fn, n: int) -> tuple[int, int]:
    """Runs fn(n) in a context of its own, as a gateway's task does; returns
    the wall and CPU nanoseconds it took."""
    ctx = contextvars.copy_context()
    w0, c0 = time.perf_counter_ns(), time.process_time_ns()
    ctx.run(fn, n)
    return time.perf_counter_ns() - w0, time.process_time_ns() - c0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("-benchtime", type=float, default=0.2, help="seconds each benchmark runs for, at least")
    p.add_argument("-count", type=int, default=0, help="run each benchmark exactly this many times instead (go test's -benchtime Nx)")
    args = p.parse_args()
    if args.benchtime <= 0:
        print("original_bench.py: -benchtime must be above 0", file=sys.stderr)
        return 2
    if args.count < 0:
        print("original_bench.py: -count must be 1 or more (0, the default, means: run for -benchtime)", file=sys.stderr)
        return 2
    kept: list = []
    for name, fn, beside_live_heap in BENCHMARKS:
        live = 0
        if beside_live_heap and not kept:
            kept, live = live_sessions()
        if args.count > 0:
            n = args.count
            wall, cpu = run(fn, n)
        else:
            # Grow n as Go's testing package does, until a run takes benchtime.
            n, wall, cpu = 1, 0, 0
            while True:
                wall, cpu = run(fn, n)
                if wall >= args.benchtime * 1e9 or n >= 1 << 30:
                    break
                grow = int(n * args.benchtime * 1e9 / max(wall, 1) * 1.2)
                n = max(n + 1, min(grow, n * 100))
        line = f"BenchmarkPythonOriginal/{name}\t{n}\t{wall / n:.1f} ns/op\t{cpu / n:.1f} cpu-ns/op"
        if live:
            line += f"\t{live} live-B"
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
