from collections.abc import Sequence

T_SET: int
MAX_CHANNELS: int

def encode_set(seq: int, codes: Sequence[int], /) -> bytes: ...
