"""A precision schedule: the clients' number format chosen per round.

Written ``ROUND:FORMAT,ROUND:FORMAT,...`` (``1:bfp_m2_g16_sr,11:bfp_m4_g16_sr``): each step names the
round it starts at and the format (``accel_sim.formats``) every client computes in from that round
on, until the next step; the first step starts at round 1 and the starts rise. The calibration
round after the last (CCVR, FFC) computes in the last step's format. Or a shipped schedule's name
(``SCHEDULES``), laid out over the run's rounds when the run is resolved
(``steps_of(text, rounds)``), so that results record the steps the run trained with.

``fast``: FAST (Zhang, McDanel and Kung, "FAST: DNN Training Under Variable Precision Block
Floating Point with Stochastic Rounding", HPCA 2022; arXiv:2110.15456, abstract: "enabling
incremental increases in DNN precision throughout training ... across both training iterations
and DNN layers") trains in block floating point with stochastic rounding and raises the mantissa
width as training goes on ("Fast First, Accurate Second"). The shipped schedule's widths, 2 then 4
mantissa bits in groups of 16 (the group this suite prices as FAST's, docs/dse.md), and its switch
at the run's midpoint (round ``1 + floor(R / 2)``) are our reading, not taken from a section of the
paper (only its abstract and introduction could be checked). FAST also varies the width per layer
and per tensor (weights, activations, gradients) and raises it on a measure of training progress;
here every GEMM operand of every layer changes together. docs/numerics.md ("Recipes") says the same.
"""

from __future__ import annotations

from dataclasses import dataclass

from accel_sim.formats import NumberFormat

FAST_FORMATS = ("bfp_m2_g16_sr", "bfp_m4_g16_sr")  # low, then high precision (our reading of FAST: module doc)


def fast_steps(rounds: int) -> str:
    """The ``fast`` schedule over ``rounds`` rounds: 2-bit mantissas, then 4-bit from round 1 + floor(R / 2)."""
    if rounds < len(FAST_FORMATS):
        raise ValueError(f"precision schedule fast changes the format once: the run needs at least "
                         f"{len(FAST_FORMATS)} rounds (it has {rounds})")
    return f"1:{FAST_FORMATS[0]},{1 + rounds // 2}:{FAST_FORMATS[1]}"


SCHEDULES = {"fast": fast_steps}
"""Shipped schedules by name: each lays itself out over the run's rounds."""


@dataclass(frozen=True)
class Step:
    """From round ``from_round`` on, every client computes in ``number_format``."""

    from_round: int
    number_format: str


def steps_of(text: str, rounds: int | None = None) -> tuple[Step, ...]:
    """The steps of ``text`` (module doc; a shipped name needs the run's ``rounds``); one-line
    ValueError naming what is wrong. With ``rounds``, a step that starts after the last round is
    refused (it would never train)."""
    text = str(text).strip()
    if text in SCHEDULES:
        if rounds is None:
            raise ValueError(f"precision schedule {text}: a shipped schedule is laid out over the run's rounds")
        text = SCHEDULES[text](rounds)
    steps = []
    for part in text.split(","):
        start, sep, name = part.partition(":")
        if not sep or not start.strip().isdigit():
            raise ValueError(f"precision schedule {text!r}: {part!r} is not ROUND:FORMAT; write "
                             f"1:bfp_m2_g16,11:bfp_m4_g16 or a shipped schedule ({', '.join(SCHEDULES)})")
        try:
            steps.append(Step(int(start), NumberFormat.parse(name.strip()).name))
        except ValueError as err:
            raise ValueError(f"precision schedule {text!r}: {err}") from None
    starts = [s.from_round for s in steps]
    if starts[0] != 1 or any(b <= a for a, b in zip(starts, starts[1:])):
        raise ValueError(f"precision schedule {text!r}: the steps start at round 1 and their rounds rise "
                         f"(given {starts})")
    if rounds is not None and starts[-1] > rounds:
        raise ValueError(f"precision schedule {text!r}: a step starts at round {starts[-1]}, after the run's "
                         f"last round {rounds}")
    return tuple(steps)


def schedule_text(steps: tuple[Step, ...]) -> str:
    """``steps`` written as ``steps_of`` reads them, in canonical format names."""
    return ",".join(f"{s.from_round}:{s.number_format}" for s in steps)


def canonical(text: str, rounds: int) -> str:
    """``text`` checked over ``rounds`` rounds (``steps_of``): a shipped name as written, else its
    steps in canonical format names."""
    steps = steps_of(text, rounds)
    return str(text).strip() if str(text).strip() in SCHEDULES else schedule_text(steps)


def is_schedule(text: str) -> bool:
    """Whether ``text`` names a schedule (a shipped one, or ``ROUND:FORMAT,...``) rather than a format."""
    return str(text).strip() in SCHEDULES or ":" in str(text)


def format_at(steps: tuple[Step, ...], round: int) -> str:
    """The format of round ``round``: the last step started by then (round 0, before the first
    round: the first step's; a calibration round after the last: the last step's)."""
    return [s for s in steps if s.from_round <= max(round, 1)][-1].number_format
