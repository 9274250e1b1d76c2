"""A vector of bools as hex text in a JSON file: 8 values a byte, the first value in the highest bit
(``numpy.packbits``' order), so 1,000 test images take 250 characters."""

from __future__ import annotations

import numpy as np


def packed_hex(bits: np.ndarray) -> str:
    """``bits`` (bool, one dimension) as hex text; ``unpacked`` reads it back."""
    return np.packbits(np.asarray(bits, dtype=bool).astype(np.uint8)).tobytes().hex()


def unpacked(text: str, n: int) -> np.ndarray:
    """The first ``n`` bools of ``packed_hex``'s text; ValueError when the text holds fewer than ``n``
    or is not hex."""
    raw = np.unpackbits(np.frombuffer(bytes.fromhex(text), dtype=np.uint8))
    if len(raw) < n or len(raw) - n >= 8:
        raise ValueError(f"{len(text)} hex digits hold {len(raw)} bits, not {n}")
    return raw[:n].astype(bool)
