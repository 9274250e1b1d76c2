"""The numba kernel of ``workloads.numerics.fused`` (imported only when a rounding first needs it:
numba's import and compilation are not paid by runs that round nothing). Every operation is
``quantize``'s, in float32, in the same order; the module doc of ``fused`` says why."""

from __future__ import annotations

import sys

import numpy as np
from numba import carray, njit, types
from numba.extending import intrinsic

EXPONENT_MASK = np.int32(0x7F800000)
MAGNITUDE_MASK = np.int32(0x7FFFFFFF)
SMALLEST_NORMAL_BITS = np.int32(0x00800000)
SMALLEST_NORMAL = np.float32(2.0 ** -126)
INVERSE_BITS = np.int32(0x7F000000)  # a normal power of two's bits subtracted from this: its inverse's (254 - E)
SCALE_MIN, SCALE_MAX = np.float32(2.0 ** -127), np.float32(2.0 ** 127)
ZERO, TWO = np.float32(0.0), np.float32(2.0)
NAN = np.float32(np.nan)
GAMMA = np.uint64(0x9E3779B97F4A7C15)  # splitmix's constants (workloads.numerics.splitmix)
MIX_M1, MIX_M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
MIX_S1, MIX_S2, MIX_S3 = np.uint64(30), np.uint64(27), np.uint64(31)
MASK32 = np.uint64(0xFFFFFFFF)
THIRTY_TWO = np.uint64(32)
BFP, MX, SCALED = 0, 1, 2
CHUNK = np.uint64(1024)  # values rounded per inner loop (a run longer than that: in chunks)
U0, U1, TWO_U = np.uint64(0), np.uint64(1), np.uint64(2)
HALVES_LOW_FIRST = sys.byteorder == "little"  # a uint64 in memory: its low 32-bit half first


@intrinsic
def _bits(typingctx, value):
    """A float32's bit pattern as an int32 (a bit cast)."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], context.get_value_type(types.int32))
    return types.int32(types.float32), codegen


@intrinsic
def _float(typingctx, bits):
    """An int32 bit pattern as the float32 it encodes (a bit cast)."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], context.get_value_type(types.float32))
    return types.float32(types.int32), codegen


@intrinsic
def _float_pointer(typingctx, address):
    """A memory address (an integer, ``torch.Tensor.data_ptr``) as a pointer to float32 values."""
    def codegen(context, builder, signature, args):
        return builder.inttoptr(args[0], context.get_value_type(types.CPointer(types.float32)))
    return types.CPointer(types.float32)(address), codegen


@intrinsic
def _int_pointer(typingctx, address):
    """A memory address as a pointer to int32 values (the same memory's float32 bit patterns)."""
    def codegen(context, builder, signature, args):
        return builder.inttoptr(args[0], context.get_value_type(types.CPointer(types.int32)))
    return types.CPointer(types.int32)(address), codegen


@njit(inline="always", error_model="numpy")
def _mix64(z):
    """SplitMix64's finaliser (``workloads.numerics.splitmix.mix64``; uint64 arithmetic wraps mod 2^64)."""
    z = (z ^ (z >> MIX_S1)) * MIX_M1
    z = (z ^ (z >> MIX_S2)) * MIX_M2
    return z ^ (z >> MIX_S3)


@njit(inline="always", error_model="numpy")
def _splitmix64(counter, seed):
    """SplitMix64's output number ``counter + 1`` from ``seed``, ``mix64(seed + (counter + 1)
    GAMMA)`` (``workloads.numerics.splitmix.splitmix64``)."""
    return _mix64(seed + (counter + U1) * GAMMA)


@njit(inline="always", error_model="numpy")
def _uniform(word, shift, unit):
    """A 32-bit word's top ``32 - shift`` bits as a uniform number (``splitmix.uniform_of_words``);
    through int32, which holds them (``shift >= 1``) and converts to float32 faster than uint64."""
    return np.float32(np.int32(word >> shift)) * unit


@njit(inline="always", error_model="numpy")
def _hash_pairs(words, n, position, seed):
    """The random words of the ``n`` adjacent positions from ``position`` into ``words`` (uint64):
    SplitMix64's outputs ``floor(position / 2)`` on (position ``j``'s word is word ``j mod 2``, low
    then high, of output ``floor(j / 2)``: ``splitmix.counter_uniform``), so that ``words``' 32-bit
    halves in memory order, from half ``position mod 2`` on, are the positions' words in order (a
    little-endian machine stores a uint64's low half first, ``HALVES_LOW_FIRST``; elsewhere the
    halves are swapped before the store). Read back as uint32 (``halves``, a view of the same
    memory) in the rounding's loop, 16 words convert in one vector operation; split from the 64-bit
    outputs they took two shifts, two narrowings and an interleave more. The counter's ``seed + (c
    + 1) GAMMA`` advances by an addition (the same sum mod 2^64, one 64-bit multiply less)."""
    z = seed + ((position >> U1) + U1) * GAMMA
    for p in range((n + (position & U1) + U1) >> U1):
        word = _mix64(z)
        words[p] = word if HALVES_LOW_FIRST else (word << THIRTY_TWO) | (word >> THIRTY_TWO)
        z += GAMMA


@njit(inline="always", error_model="numpy")
def _fill_words(halves, at, n, position, step, seed):
    """``halves[at:at + n]`` (uint32): the random words of positions ``position, position + step,
    ...`` (``_hash_pairs``' words, for positions that are not adjacent values in memory). Adjacent
    positions take both words of an output (one call for two words); an even ``step`` takes the
    same word of each output, whose counter then advances by an addition."""
    if step == U1:
        j = U0
        if position & U1 and n > U0:  # an odd first position: the high word of its output
            halves[at] = np.uint32(_splitmix64(position >> U1, seed) >> THIRTY_TWO)
            j = U1
        first = (position + j) >> U1
        for p in range((n - j) >> U1):
            word = _splitmix64(first + p, seed)
            halves[at + j + TWO_U * p] = np.uint32(word & MASK32)
            halves[at + j + TWO_U * p + U1] = np.uint32(word >> THIRTY_TWO)
        if (n - j) & U1:  # an even last position: the low word of its output
            halves[at + n - U1] = np.uint32(_splitmix64((position + n - U1) >> U1, seed) & MASK32)
    elif step & U1 == U0:
        half = (position & U1) * THIRTY_TWO
        z = seed + ((position >> U1) + U1) * GAMMA
        for j in range(n):
            halves[at + j] = np.uint32((_mix64(z) >> half) & MASK32)
            z += (step >> U1) * GAMMA
    else:
        for j in range(n):
            c = position + j * step
            word = _splitmix64(c >> U1, seed)
            halves[at + j] = np.uint32(word >> THIRTY_TWO if c & U1 else word & MASK32)


@njit(inline="always", error_model="numpy")
def _clamp(v, bound):
    """``v`` clamped to ``[-bound, bound]``, NaN kept (torch's clamp)."""
    if v > bound:
        return bound
    if v < -bound:
        return -bound
    return v


@njit(inline="always", error_model="numpy")
def _block_factor(top_bits, scale_of, kind, carry, round_up):
    """A group's unit (BFP, ``quantize.bfp_unit``) or scale (MX, ``quantize.mx_scale``) from the bit
    pattern of its largest magnitude; ``scale_of``: ``(2^(1 - m), max_finite, 2^-emax)``."""
    if kind == BFP:
        bits = min(max(top_bits, SMALLEST_NORMAL_BITS), EXPONENT_MASK)
        return _float(np.int32((bits + carry) & EXPONENT_MASK)) * scale_of[0]
    if top_bits >= EXPONENT_MASK:  # an infinity or NaN in the block: the specification's NaN scale
        return NAN
    scale = max(_float(np.int32(top_bits & EXPONENT_MASK)), SMALLEST_NORMAL) * scale_of[2]
    if round_up and _float(top_bits) > scale_of[1] * scale:
        scale = scale * TWO
    return min(max(scale, SCALE_MIN), SCALE_MAX)


@njit(inline="always", error_model="numpy")
def _onto_grid(x, grid):
    """``x / factor`` on the element's grid before rounding (scaled FP8, ``factor = 2^-s``):
    ``(v, ulp, 1 / ulp)`` with ``v`` the value clamped to the element's largest (+ ``x x 0``: NaN
    where ``x`` is infinite) and ``ulp`` its unit in the last place, ``max(2^floor(log2 |v|),
    2^e_min) x 2^(1 - p)`` (``quantize._onto_grid_``). ``grid``: ``(2^(1 - p), 2^e_min, max_finite,
    the largest result, 2^s, 2^(p - 1))`` (``fused.Rule.floats``).

    No division, the same bits (issue 55): ``x / 2^-s`` is ``x x 2^s`` (``2^s`` a float32, up to
    ``2^127``: both are the correctly rounded ``x 2^s``, overflow and underflow included, and a NaN
    ``x`` stays itself), and ``v / ulp`` is ``v x (1 / ulp)``: ``ulp`` is a power of two between
    ``2^(e_min + 1 - p)`` and the element's ``2^(emax + 1 - p)``, so ``1 / ulp`` is a float32 and
    the product is the same correctly rounded quotient. ``1 / max(binade, 2^e_min)`` (a normal power
    of two, exponent field ``E``) is the float with exponent field ``254 - E``: its bit pattern
    ``0x7F000000 - bits``; where ``v`` is NaN its binade reads as infinity, this gives ``-inf``, and
    ``v x -inf`` is ``v``'s NaN, as ``v / inf`` was."""
    v = _clamp(x * grid[4], grid[2]) + x * ZERO
    binade = _float(np.int32(_bits(v) & EXPONENT_MASK))
    b = binade if binade > grid[1] else grid[1]
    return v, b * grid[0], _float(np.int32(INVERSE_BITS - _bits(b))) * grid[5]


@njit(inline="always", error_model="numpy")
def _back(r, ulp, factor, grid):
    """A value rounded to ``r`` units of ``ulp`` on the element's grid, saturated and scaled back."""
    return _clamp(_clamp(r * ulp, grid[2]) * factor, grid[3])


@njit(inline="always", error_model="numpy")
def _onto_mx_grid(x, scale, grid):
    """``_onto_grid`` for an MX block: ``x / scale`` clamped, without ``+ x 0`` (an infinite or NaN
    ``x`` gives its block the NaN scale, so ``x / scale`` is NaN already, and for a finite ``x`` the
    ``+ x 0`` adds a zero of the quotient's own sign)."""
    v = _clamp(x / scale, grid[2])
    binade = _float(np.int32(_bits(v) & EXPONENT_MASK))
    return v, (binade if binade > grid[1] else grid[1]) * grid[0]


@njit(inline="always", error_model="numpy")
def _back_mx(r, ulp, scale, grid):
    """``_back`` for an MX block, without the clamp to the element's largest value: ``|v|`` is at
    most that value, which lies on the grid, so ``r`` units of ``ulp`` (``v`` rounded to nearest or
    either way) are too."""
    return _clamp(r * ulp * scale, grid[3])


@njit(inline="always", error_model="numpy")
def _nearest_run(xf, out, start, factors, at, n, grid, kind):
    """``n`` values from ``start`` rounded to nearest, value ``j`` with factor ``factors[at + j]``.
    BFP: ``rint(x / f) f``, what the formula (``round_blocks``) comes to on BFP's grid of
    unit 1 with nothing clamped (for a finite ``x``: ``v = x / f``, ``|v| < 2^m`` so its ``ulp`` is 1,
    and the clamps keep what they are given; in a block whose unit is infinite, one holding an
    infinity or NaN, both give NaN for every value), in 3 operations a value instead of ~15. MX:
    the formula less what cannot change an MX value (``_onto_mx_grid``, ``_back_mx``)."""
    if kind == BFP:
        for j in range(n):
            f = factors[at + j]
            out[start + j] = np.rint(xf[start + j] / f) * f
    else:  # MX (scaled FP8: _round_scaled)
        for j in range(n):
            f = factors[at + j]
            v, ulp = _onto_mx_grid(xf[start + j], f, grid)
            out[start + j] = _back_mx(np.rint(v / ulp), ulp, f, grid)


@njit(inline="always", error_model="numpy")
def _stochastic_run(arrays, start, factors, at, n, words, grid, kind):
    """``_nearest_run`` rounding stochastically (``arrays``: the values and the result), value ``j``
    with the uniform number of random word ``halves[j]`` (``words``: ``(halves, shift, unit)``,
    ``_uniform``): ``floor(x / f + u) f`` for BFP."""
    xf, out = arrays
    halves, shift, unit = words
    if kind == BFP:
        for j in range(n):
            f = factors[at + j]
            out[start + j] = np.floor(xf[start + j] / f + _uniform(halves[j], shift, unit)) * f
    else:  # MX
        for j in range(n):
            f = factors[at + j]
            v, ulp = _onto_mx_grid(xf[start + j], f, grid)
            out[start + j] = _back_mx(np.floor(v / ulp + _uniform(halves[j], shift, unit)), ulp, f, grid)


@njit(nogil=True, boundscheck=False, error_model="numpy")
def _round_adjacent_blocks(xf, xi, out, nest, floats, ints):
    """``round_blocks`` where a block (a group's values at each of ``m1`` positions inside it) is one
    run of adjacent values and the blocks follow one another: a group of adjacent values (``m1 =
    1``: a channels-last tensor's channels, a matrix along its rows), or an NCHW tensor's channels
    over a few pixels, or a channels-last tensor's pixels (``m1`` its channels, a block of up to a
    chunk). A batch of blocks at a time: their factors (and uniform numbers) spread over the
    batch's values, then one loop over them all (a loop per group of 16 values, or per 4 pixels,
    costs more than the values). Groups of adjacent values apart in memory (``m1 = 1``, a block
    stride ``s2`` beyond the group: a channels-last tensor of 24 channels, grouped 16 and 8) take
    the batch's factors and draws too, then a loop per block. Issue 55's fourth pass sent the last
    two here (blocks up to 1024 values instead of 256): in the generic loops of ``round_blocks`` a
    run of 16, 24 or 32 values cost 1-3 ns a value (``benchmarks/bench_step_kernel.py``)."""
    kind, carry, round_up = ints[0], np.int32(ints[1]), ints[2] != 0
    seed, bits = (np.uint64(ints[3]) << THIRTY_TWO) | np.uint64(ints[4]), ints[5]  # stream x 2^32 + key
    stochastic = bits > 0
    shift = np.uint64(32 - bits) if stochastic else np.uint64(0)
    grid = (floats[0], floats[1], floats[2], floats[3])
    unit = floats[6]
    scale_of = (floats[7], floats[2], floats[4])
    offset, coffset = nest[0], nest[1]
    n0, n1, n2, group, m1 = nest[2], nest[3], nest[4], nest[5], nest[7]
    s0, s1, s2 = nest[8], nest[9], nest[10]
    c0, c1, c2, cg, d1 = nest[14], nest[15], nest[16], nest[17], nest[19]
    block = group * m1
    batch = CHUNK // block
    adjacent_positions = (m1 == 1 or d1 == 1) and (m1 == 1 and cg == 1 or cg == m1) and c2 == block
    factors = np.empty(batch * block, np.float32)
    words = np.zeros(CHUNK // TWO_U + U1, np.uint64)  # stochastic rounding's random words (_hash_pairs)
    halves = words.view(np.uint32)
    top = np.empty(m1, np.int32)
    for i0 in range(n0):
        for i1 in range(n1):
            for b0 in range(U0, n2, batch):
                nb = min(batch, n2 - b0)
                start = offset + i0 * s0 + i1 * s1 + b0 * s2
                cbase = coffset + i0 * c0 + i1 * c1 + b0 * c2
                for q in range(nb):
                    at = q * block
                    if m1 == 1:
                        largest = np.int32(0)
                        for j in range(group):
                            b = np.int32(xi[start + q * s2 + j] & MAGNITUDE_MASK)
                            largest = b if b > largest else largest
                        top[0] = largest
                    else:
                        top[:] = 0
                        for g in range(group):
                            row = start + at + g * m1
                            for j in range(m1):
                                b = np.int32(xi[row + j] & MAGNITUDE_MASK)
                                top[j] = b if b > top[j] else top[j]
                    for j in range(m1):
                        f = _block_factor(top[j], scale_of, kind, carry, round_up)
                        for g in range(group):
                            factors[at + g * m1 + j] = f
                    if stochastic and not adjacent_positions and m1 == 1:  # one loop over the group
                        _fill_words(halves, at, group, cbase + q * c2, cg, seed)
                    elif stochastic and not adjacent_positions:
                        for g in range(group):
                            _fill_words(halves, at + g * m1, m1, cbase + q * c2 + g * cg, d1, seed)
                first = U0  # the batch's first random word in halves
                if stochastic and adjacent_positions:  # the batch's positions follow one another: one loop
                    _hash_pairs(words, nb * block, cbase, seed)
                    first = cbase & U1
                if s2 != block:  # blocks apart in memory (a group of adjacent values, m1 = 1): a loop per block
                    for q in range(nb):
                        if stochastic:
                            _stochastic_run((xf, out), start + q * s2, factors, q * block, block,
                                            (halves[first + q * block:], shift, unit), grid, kind)
                        else:
                            _nearest_run(xf, out, start + q * s2, factors, q * block, block, grid, kind)
                elif stochastic:
                    n = nb * block
                    if kind == BFP:
                        for j in range(n):
                            u = _uniform(halves[first + j], shift, unit)
                            out[start + j] = np.floor(xf[start + j] / factors[j] + u) * factors[j]
                    else:  # MX
                        for j in range(n):
                            v, ulp = _onto_mx_grid(xf[start + j], factors[j], grid)
                            u = _uniform(halves[first + j], shift, unit)
                            out[start + j] = _back_mx(np.floor(v / ulp + u), ulp, factors[j], grid)
                elif kind == BFP:
                    for j in range(nb * block):
                        out[start + j] = np.rint(xf[start + j] / factors[j]) * factors[j]
                else:  # MX
                    for j in range(nb * block):
                        v, ulp = _onto_mx_grid(xf[start + j], factors[j], grid)
                        out[start + j] = _back_mx(np.rint(v / ulp), ulp, factors[j], grid)


@njit(cache=True, nogil=True, boundscheck=False, error_model="numpy")
def round_blocks(xf, xi, out, nest, floats, ints):
    """Round the values of one piece (``fused.geometry``'s loop ``nest`` over the flat memory ``xf``,
    ``xi`` its bit patterns; its innermost dim a run of adjacent values) into ``out``: per block of
    groups, the largest magnitudes at each position inside the group, their units or scales, then
    every value, a run of adjacent values at a time.

    One formula serves the three kinds (``fused.Rule.floats`` sets its constants), so the loops over
    a run have no branch and LLVM turns them into vector instructions: a value ``x`` with factor
    ``f`` becomes ``clamp(clamp(round(v / ulp) ulp) f)``, ``v = clamp(x / f) + x 0``. For MX that is
    ``round_mx`` (the first clamp changes nothing: rounding is monotone and the largest value is on
    the grid); for BFP the grid's unit is 1 (``2^e_min = 2^23``, ``2^(1 - p) = 2^-23``) and nothing
    is clamped, so it is ``round(x / unit) unit``; for scaled FP8 the factor is ``2^-s``, and
    dividing by it is multiplying by ``2^s`` (both exact, or the same rounding of the same number):
    its loops multiply (``_onto_grid``), and read its values' largest magnitude in the same pass
    (returned: delayed scaling's own amax, ``quantize.round_measured``).
    For BFP the formula comes to ``rint(x / f) f`` (``floor(x / f + u) f`` stochastically:
    ``_nearest_run``), and BFP's loops compute just that: 3 operations a value instead of ~15 (an
    NCHW step's BFP operands 0.29-0.49 -> 0.18-0.29 ns a value, the same bits); MX's leave out the
    ``+ x 0`` and the first clamp, which change no MX value (``_onto_mx_grid``, ``_back_mx``:
    0.32-0.39 -> 0.26-0.33 ns). The loops over a
    run are written out for each case (one factor or one per position, nearest or stochastic, BFP
    or not): folded into one inline helper with the case as an argument, LLVM vectorized them less
    (a run of 256 values 0.29 -> 0.44 ns a value; groups of 16 adjacent values, stochastic,
    0.99 -> 1.32 ns)."""
    kind, carry, round_up = ints[0], np.int32(ints[1]), ints[2] != 0
    seed, bits = (np.uint64(ints[3]) << THIRTY_TWO) | np.uint64(ints[4]), ints[5]  # stream x 2^32 + key
    stochastic = bits > 0
    shift = np.uint64(32 - bits) if stochastic else np.uint64(0)
    grid = (floats[0], floats[1], floats[2], floats[3])  # scalars: no load in the loops (the arrays might alias)
    unit = floats[6]
    scale_of = (floats[7], floats[2], floats[4])
    # every index unsigned (``nest`` is uint64): numba then checks no index for a negative value,
    # a check that keeps LLVM from turning the loops into vector instructions
    offset, coffset = nest[0], nest[1]
    n0, n1, n2, group, m0, m1 = nest[2], nest[3], nest[4], nest[5], nest[6], nest[7]
    s0, s1, s2, sg, t0 = nest[8], nest[9], nest[10], nest[11], nest[12]
    c0, c1, c2, cg, d0 = nest[14], nest[15], nest[16], nest[17], nest[18]
    d1 = nest[19]
    shared = m0 * m1 == 1  # the group is the run (its stride 1): one factor for it
    run, runs, cstep = (group, np.uint64(1), cg) if shared else (m1, group * m0, d1)
    top = np.empty(m0 * m1, np.int32)
    factor = np.full(m0 * m1, floats[5], np.float32)
    words = np.zeros(CHUNK // TWO_U + U1, np.uint64)  # stochastic rounding's random words of a chunk of a run
    halves = words.view(np.uint32)
    same = np.empty(CHUNK, np.float32)  # a shared factor for each value of a chunk
    if kind != SCALED and m0 == 1 and sg == m1 and (s2 == group * m1 or m1 == 1 and s2 > group) and group * m1 <= CHUNK:
        _round_adjacent_blocks(xf, xi, out, nest, floats, ints)  # blocks of adjacent values, one after another
        return
    for i0 in range(n0):
        for i1 in range(n1):
            for i2 in range(n2):
                base = offset + i0 * s0 + i1 * s1 + i2 * s2
                cbase = coffset + i0 * c0 + i1 * c1 + i2 * c2
                if kind != SCALED:
                    top[:] = 0
                    for r in range(runs):
                        start = base + (r // m0) * sg + (r % m0) * t0
                        if shared:
                            largest = np.int32(0)
                            for j in range(run):
                                b = np.int32(xi[start + j] & MAGNITUDE_MASK)
                                largest = b if b > largest else largest
                            top[0] = largest
                        else:
                            at = (r % m0) * m1
                            for j in range(run):
                                b = np.int32(xi[start + j] & MAGNITUDE_MASK)
                                top[at + j] = b if b > top[at + j] else top[at + j]
                    for k in range(m0 * m1):
                        factor[k] = _block_factor(top[k], scale_of, kind, carry, round_up)
                if shared:
                    same[:min(run, CHUNK)] = factor[0]
                for r in range(runs):
                    g, j0 = r // m0, r % m0
                    row = base + g * sg + j0 * t0
                    crow = cbase + g * cg + j0 * d0
                    for lo in range(U0, run, CHUNK):
                        n = min(CHUNK, run - lo)
                        factors, at = (same, U0) if shared else (factor, j0 * m1 + lo)
                        if stochastic:
                            _fill_words(halves, U0, n, crow + lo * cstep, cstep, seed)
                            _stochastic_run((xf, out), row + lo, factors, at, n, (halves, shift, unit), grid, kind)
                        else:
                            _nearest_run(xf, out, row + lo, factors, at, n, grid, kind)


@njit(nogil=True, boundscheck=False, error_model="numpy")
def _round_scaled(xf, xi, out, nest, floats, ints):
    """``round_blocks`` for scaled FP8 (one factor, ``2^-s``, for every value; ``nest``'s group the
    innermost run, no dims inside it), returning the largest magnitude's bit pattern among the
    values it rounds (each chunk's read while its values are in the cache): delayed scaling's own
    amax without a pass of its own (``fused.round_whole``). Its loops multiply where the formula
    divides (``_onto_grid``). Kept apart from the BFP and MX loops: in one function with them
    (4b369d1), LLVM compiled those slower (a ``bfp_m4_g16`` channels-last step's operands 0.25 ->
    0.28 ns a value, ``benchmarks/bench_step_kernel.py``), though this loop ran faster there
    (0.145 ns a value against 0.215 here; not understood)."""
    bits = ints[5]
    stochastic = bits > 0
    seed = (np.uint64(ints[3]) << THIRTY_TWO) | np.uint64(ints[4])
    shift = np.uint64(32 - bits) if stochastic else np.uint64(0)
    unit = floats[6]
    grid = (floats[0], floats[1], floats[2], floats[3], floats[8], floats[9])
    factor = floats[5]
    offset, coffset = nest[0], nest[1]
    n0, n1, n2, run = nest[2], nest[3], nest[4], nest[5]
    s0, s1, s2, c0, c1, c2, cstep = nest[8], nest[9], nest[10], nest[14], nest[15], nest[16], nest[17]
    words = np.zeros(CHUNK // TWO_U + U1, np.uint64)  # stochastic rounding's random words (_hash_pairs)
    halves = words.view(np.uint32)
    seen = np.int32(0)
    for i0 in range(n0):
        for i1 in range(n1):
            for i2 in range(n2):
                row = offset + i0 * s0 + i1 * s1 + i2 * s2
                crow = coffset + i0 * c0 + i1 * c1 + i2 * c2
                for lo in range(U0, run, CHUNK):
                    n = min(CHUNK, run - lo)
                    start = row + lo
                    if stochastic:
                        first = U0  # the chunk's first random word in halves
                        if cstep == U1:  # a contiguous tensor's positions: adjacent
                            _hash_pairs(words, n, crow + lo, seed)
                            first = (crow + lo) & U1
                        else:
                            _fill_words(halves, U0, n, crow + lo * cstep, cstep, seed)
                        for j in range(n):
                            v, ulp, inverse = _onto_grid(xf[start + j], grid)
                            u = _uniform(halves[first + j], shift, unit)
                            out[start + j] = _back(np.floor(v * inverse + u), ulp, factor, grid)
                    else:
                        for j in range(n):
                            v, ulp, inverse = _onto_grid(xf[start + j], grid)
                            out[start + j] = _back(np.rint(v * inverse), ulp, factor, grid)
                    for j in range(n):
                        b = np.int32(xi[start + j] & MAGNITUDE_MASK)
                        seen = b if b > seen else seen
    return seen


@njit(cache=True, nogil=True, boundscheck=False, error_model="numpy")
def round_at(x_address, out_address, n, nests, floats, ints):
    """``round_blocks`` along each loop nest (a row of ``nests``) over the ``n`` float32 values at
    ``x_address`` into those at ``out_address`` (two dense tensors' memory, their ``data_ptr``, alive
    while this runs). Addresses instead of numpy arrays: a call from Python then costs ~1 us instead
    of ~8 us of converting and checking three arrays (a MobileNetV2 step rounds 346 operands).
    Returns, for scaled FP8, the largest magnitude's bit pattern among the values the nests round
    (``largest_bits``: where they cover all ``n`` values, ``round_whole``'s, the tensor's own amax,
    read in the rounding's pass instead of one of its own); 0 for BFP and MX."""
    xf, xi, out = carray(_float_pointer(x_address), n), carray(_int_pointer(x_address), n), carray(_float_pointer(out_address), n)
    seen = np.int32(0)
    for k in range(nests.shape[0]):
        if ints[0] == SCALED:
            b = _round_scaled(xf, xi, out, nests[k], floats, ints)
            seen = b if b > seen else seen
        else:
            round_blocks(xf, xi, out, nests[k], floats, ints)
    return seen


@njit(cache=True, nogil=True, boundscheck=False, error_model="numpy")
def largest_bits_at(x_address, n):
    """``largest_bits`` of the ``n`` float32 values at ``x_address``."""
    return largest_bits(carray(_int_pointer(x_address), n))


@njit(cache=True, nogil=True, boundscheck=False, error_model="numpy")
def largest_bits(xi):
    """The largest magnitude's bit pattern among the float32 bit patterns ``xi`` (one pass, no copy):
    non-negative floats order as their bit patterns, and a NaN's lie above infinity's."""
    largest = np.int32(0)
    for j in range(xi.shape[0]):
        b = np.int32(xi[j] & MAGNITUDE_MASK)
        largest = b if b > largest else largest
    return largest
