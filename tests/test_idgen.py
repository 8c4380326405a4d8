"""ID choice in every mode (crdt/idgen.py), as pure code."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crdt import idgen
from crdt.ids import U64

STRIDE = 16


def test_liberal_is_redis():
    assert idgen.choose(idgen.LIBERAL, (5, 3), 4, 1, STRIDE, None, True) == (5, 4)
    assert idgen.choose(idgen.LIBERAL, (5, 3), 9, 1, STRIDE, None, True) == (9, 0)
    assert idgen.choose(idgen.LIBERAL, (5, 3), 0, 1, STRIDE, (7, 0), False) == (7, 0)
    with pytest.raises(idgen.IdError, match="equal or smaller"):
        idgen.choose(idgen.LIBERAL, (5, 3), 0, 1, STRIDE, (5, 3), True)


def test_strict_shows_the_region_in_the_sequence():
    # seed 003: region 1 writes 110, 120, 130; region 2 writes 115
    assert idgen.choose(idgen.STRICT, (0, 0), 0, 1, STRIDE, (110, 0), False) == (110, 1)
    assert idgen.choose(idgen.STRICT, (0, 0), 0, 2, STRIDE, (115, 0), False) == (115, 2)
    assert idgen.choose(idgen.STRICT, (110, 1), 0, 1, STRIDE, (120, 0), False) == (120, 1)


def test_strict_steps_by_the_stride_within_one_millisecond():
    ids, last = [], (0, 0)
    for _ in range(3):
        last = idgen.choose(idgen.STRICT, last, 7, 1, STRIDE, None, True)
        ids.append(last)
    assert ids == [(7, 1), (7, 17), (7, 33)]
    # another region's entry in the same millisecond is skipped past, keeping the residue
    assert idgen.choose(idgen.STRICT, (7, 34), 7, 1, STRIDE, None, True) == (7, 49)


def test_strict_refuses_full_ids_semi_strict_accepts_them():
    with pytest.raises(idgen.IdError, match="strict ID mode"):
        idgen.choose(idgen.STRICT, (0, 0), 0, 1, STRIDE, (5, 5), True)
    assert idgen.choose(idgen.SEMI_STRICT, (0, 0), 0, 1, STRIDE, (5, 5), True) == (5, 5)
    assert idgen.choose(idgen.SEMI_STRICT, (0, 0), 0, 3, STRIDE, (5, 0), False) == (5, 3)


def test_strict_overflow_moves_to_the_next_millisecond():
    assert idgen.strict((9, U64 - 2), 0, 1, STRIDE) == (10, 1)
    with pytest.raises(idgen.IdError):
        idgen.strict((9, U64 - 2), 0, 1, STRIDE, wanted_ms=9)


@given(ops=st.lists(st.tuples(st.integers(1, 3), st.integers(0, 5), st.booleans()), max_size=60))
def test_two_regions_never_mint_the_same_id(ops):
    """Each region only sees its own writes (no sync at all: the worst case)."""
    last = {1: (0, 0), 2: (0, 0), 3: (0, 0)}
    minted: set = set()
    for region, clock, with_ms in ops:
        wanted = (last[region][0] + clock, 0) if with_ms else None
        new = idgen.choose(idgen.STRICT, last[region], clock, region, STRIDE, wanted, False)
        assert new > last[region] and new not in minted
        assert new[1] % STRIDE == region
        minted.add(new)
        last[region] = new
