"""The ways a round's clients can train, as a registry (``WAYS``, a plain dict from a way's name to
its ``Way``, as ``workloads.capture.lowering.LOWERINGS`` maps an op to its lowering), and the one
chooser both the run (``loop.train``) and its forecast (``workloads.fl.forecast``) ask, so that
the two cannot disagree.

A way names the option that asks for it, why a run cannot train that way (its fallback reason;
None: it can), the function that trains a round's clients that way, and the function that times
it. The options exclude each other (``Execution`` refuses two at once), so at most one way is asked
for; where it cannot be had, the run says so in one line and trains its clients one after another
(the results are the same, bit for bit, or to float rounding for "together": its module says why).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from workloads.fl import capture, clients, threads, together
from workloads.fl.clients import ClientResult, RoundWork
from workloads.fl.execution import Execution
from workloads.fl.methods import MethodConfig
from workloads.fl.setup import ONE_AFTER_ANOTHER
from workloads.fl.timing import Timed, step_rate, together_rate


@dataclass(frozen=True)
class Probe:
    """What the chooser looks at: the method, the options, and whether a local step of the run's
    model draws from torch's global generator (``draws_global()``: one probing step, asked only
    by a way that needs the answer)."""

    method: MethodConfig
    execution: Execution
    draws_global: Callable[[], bool]


@dataclass(frozen=True)
class Way:
    """One way of training a round's clients."""

    name: str
    asked: Callable[[Execution], bool]  # whether the options ask for it
    fallback_reason: Callable[[Probe], str | None]  # why it cannot be had (None: it can)
    fallback_line: Callable[[str, str], str]  # (method name, reason) -> the line the run prints
    train: Callable[[RoundWork], list[ClientResult]]  # a round's clients trained this way
    rate: Callable[[Timed, int], tuple[float, str]]  # (samples/s, how it ran) of timed steps, a round's client count given


def _draws_reason(probe: Probe) -> str | None:
    if probe.draws_global():
        return "its model draws from torch's global generator in a local step (dropout?), which threads would interleave"
    return None


def _threads_rate(timed: Timed, per_round: int) -> tuple[float, str]:
    used = min(timed.execution.client_threads, per_round)
    return step_rate(timed, clients=used), f"{used} clients at once on threads" if used > 1 else ""


def _recorded_rate(timed: Timed, per_round: int) -> tuple[float, str]:  # noqa: ARG001 - one client at a time
    cuda = timed.execution.torch_device.type == "cuda"
    return step_rate(timed, recorded=True), "the step replayed as a CUDA graph" if cuda else ""


def _together_rate(timed: Timed, per_round: int) -> tuple[float, str]:
    return together_rate(timed, per_round), f"{per_round} client{'s' if per_round != 1 else ''} together"


WAYS: dict[str, Way] = {
    "together": Way("together", lambda ex: ex.clients_together,
                    lambda probe: together.fallback_reason(probe.method, probe.execution), together.fallback_line,
                    clients.together, _together_rate),
    "threads": Way("threads", lambda ex: ex.client_threads > 1, _draws_reason, threads.fallback_line,
                   clients.on_threads, _threads_rate),
    "recorded": Way("recorded", lambda ex: ex.capture_step,
                    lambda probe: capture.fallback_reason(probe.execution, probe.draws_global), capture.fallback_line,
                    clients.one_after_another, _recorded_rate),
    ONE_AFTER_ANOTHER: Way(ONE_AFTER_ANOTHER, lambda ex: True, lambda probe: None, lambda name, reason: "",
                           clients.one_after_another, lambda timed, per_round: (step_rate(timed), "")),
}


@dataclass(frozen=True)
class Choice:
    """The way a run's clients train, and the line that says why not the one asked for (None: as asked)."""

    way: Way
    fallback: str | None = None


def choose(probe: Probe) -> Choice:
    """The way the options ask for (the first in ``WAYS`` that they ask for) if the run can have
    it, else one after another with the line that says why."""
    asked = next(way for way in WAYS.values() if way.asked(probe.execution))
    reason = asked.fallback_reason(probe)
    if reason is None:
        return Choice(asked)
    return Choice(WAYS[ONE_AFTER_ANOTHER], asked.fallback_line(probe.method.name, reason))
