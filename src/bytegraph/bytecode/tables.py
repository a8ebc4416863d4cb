"""Binary side tables of code objects: exception table and location table.

Formats (shared by CPython 3.11-3.13, see Objects/exception_handling_notes.txt
and Objects/locations.md in CPython):

* ``co_exceptiontable``: a sequence of entries ``(start, length, target,
  depth << 1 | lasti)``, offsets in code units.  Each number is a big-endian
  varint of 6-bit chunks with 0x40 as "more follows"; the first byte of an
  entry additionally carries 0x80.
* ``co_linetable``: a sequence of entries, each covering 1..8 code units.
  The first byte is ``0x80 | code << 3 | (units - 1)``; the code picks the
  short / one-line / no-column / long / no-location form.  Varints here are
  little-endian 6-bit chunks with 0x40 as "more follows".

The encoder makes the same form choices as CPython's compiler, so
reassembled tables usually come out byte-identical.
"""

from __future__ import annotations

# Location entry codes.
_LOC_ONE_LINE0 = 10
_LOC_NO_COLUMNS = 13
_LOC_LONG = 14
_LOC_NONE = 15


def parse_exception_table(raw: bytes) -> list:
    """Decode ``co_exceptiontable`` into ``(start, end, target, depth, lasti)``
    tuples, all in code units, ``end`` exclusive."""
    out = []
    i, n = 0, len(raw)

    def varint():
        nonlocal i
        b = raw[i]
        i += 1
        val = b & 63
        while b & 64:
            b = raw[i]
            i += 1
            val = (val << 6) | (b & 63)
        return val

    while i < n:
        start = varint()
        length = varint()
        target = varint()
        dl = varint()
        out.append((start, start + length, target, dl >> 1, bool(dl & 1)))
    return out


def _exn_varint(out: bytearray, value: int, msb: int) -> None:
    if value < 0 or value >= 1 << 30:
        raise ValueError(f"exception table value out of range: {value}")
    shift = 24
    while shift:
        if value >= 1 << shift:
            out.append(((value >> shift) & 63) | 64 | msb)
            msb = 0
        shift -= 6
    out.append((value & 63) | msb)


def encode_exception_table(entries) -> bytes:
    """Encode ``(start, end, target, depth, lasti)`` tuples (code units)."""
    out = bytearray()
    for start, end, target, depth, lasti in entries:
        _exn_varint(out, start, 0x80)
        _exn_varint(out, end - start, 0)
        _exn_varint(out, target, 0)
        _exn_varint(out, (depth << 1) | int(bool(lasti)), 0)
    return bytes(out)


def _loc_varint(out: bytearray, val: int) -> None:
    while val >= 64:
        out.append(64 | (val & 63))
        val >>= 6
    out.append(val)


def _loc_svarint(out: bytearray, val: int) -> None:
    _loc_varint(out, ((-val) << 1) | 1 if val < 0 else val << 1)


def _merged(items):
    prev, total = None, 0
    for pos, units in items:
        key = None if pos is None or pos[0] is None else tuple(pos)
        if total and key == prev:
            total += units
            continue
        if total:
            yield prev, total
        prev, total = key, units
    if total:
        yield prev, total


def encode_linetable(items, firstlineno: int, merge: bool = False) -> bytes:
    """Encode the location table.

    ``items`` yields ``(positions, units)`` per instruction, where
    ``positions`` is a ``(lineno, end_lineno, col, end_col)`` tuple (members
    may be None) or None for "no location", and ``units`` counts all code
    units of the instruction (EXTENDED_ARGs and caches included).  With
    ``merge`` (CPython 3.12+), consecutive instructions at the same location
    share entries, as CPython's compiler writes them.
    """
    if merge:
        items = _merged(items)
    out = bytearray()
    cur_line = firstlineno
    for pos, units in items:
        if pos is None or pos[0] is None:
            line = -1
        else:
            line, end_line, col, end_col = pos
            end_line = -1 if end_line is None else end_line
            col = -1 if col is None else col
            end_col = -1 if end_col is None else end_col
        while units > 0:
            size = 8 if units > 8 else units
            units -= size
            head = 0x80 | (size - 1)
            if line < 0:
                out.append(head | _LOC_NONE << 3)
                continue
            delta = line - cur_line
            if col < 0 or end_col < 0:
                if end_line == line or end_line == -1:
                    out.append(head | _LOC_NO_COLUMNS << 3)
                    _loc_svarint(out, delta)
                    cur_line = line
                    continue
            elif end_line == line:
                if delta == 0 and col < 80 and 0 <= end_col - col < 16:
                    out.append(head | (col >> 3) << 3)
                    out.append(((col & 7) << 4) | (end_col - col))
                    continue
                if 0 <= delta < 3 and col < 128 and end_col < 128:
                    out.append(head | (_LOC_ONE_LINE0 + delta) << 3)
                    out.append(col)
                    out.append(end_col)
                    cur_line = line
                    continue
            out.append(head | _LOC_LONG << 3)
            _loc_svarint(out, delta)
            _loc_varint(out, max(end_line - line, 0))
            _loc_varint(out, col + 1)
            _loc_varint(out, end_col + 1)
            cur_line = line
    return bytes(out)
