"""Key values of any type as int64 codes at an engine's boundary (issue 38).

The compiled paths (F-IVM's ``_covar_kernel`` over :class:`~ivm.engines.fivm.columnar.ColumnStore`
views in int mode, their :class:`~ivm.engines.fivm._int_index.Int64Index`) key views by one int64
per tuple.  A :class:`KeyDictionary` gives every key value such a code, so a float, string, bytes,
bool, timestamp, date, ``None`` or big-int key takes the same compiled path as an int key instead
of leaving it for the Python one:

- an ``int`` in ``[-2**62, 2**63)`` is its own code (the identity: int keys cost nothing, and
  snapshots of int-keyed views are unchanged);
- any value equal to such an int under Python equality is that int's code: ``3.0``, ``True``,
  ``Decimal(3)``, ``numpy.int32(3)``, and ``-0.0`` and ``0.0`` alike (0), as the reference
  implementation's ``dict`` keys would merge them;
- every other value is *interned*: a dense id ``LOW + 1, LOW + 2, ...`` in the reserved range
  ``[-2**63, -2**62)``, one per distinct value under Python equality (a ``dict`` assigns them, so
  ``1.5`` and ``Decimal("1.5")`` get one id, ``"a"`` and ``b"a"`` two); an ``int`` of that range or
  beyond int64 is interned too, so no int is ever mistaken for an interned id;
- NaN is refused with a :class:`ValueError` naming it (it equals nothing, not even itself, so no
  key could find it again).

One dictionary per engine serves every join variable's domain, so an equal value gets one code in
every relation and view (the join matches on codes exactly where it would on values).  Reading a
view back (results, enumeration, snapshots of values) translates codes with :meth:`value` /
:meth:`values`; a code maps back to the value first interned for it (``1.5`` or ``Decimal("1.5")``,
equal either way, as a ``dict`` keeps its first key).

Ids are not freed when a value's last tuple is deleted: the compiled kernels insert and delete view
keys in C without calling back into Python, so a per-value reference count would put a Python call
on every key change of the hot loop.  The dictionary therefore holds each distinct non-int key value
ever seen (the value, a ``dict`` slot and a list slot, about 100-150 bytes for a float or a short
string); :meth:`memory` reports it and the engines' ``stats()`` show it.  Snapshots carry the
dictionary (its values, in id order), so codes stored in the views stay valid after a restore.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from datetime import date, datetime, time, timedelta
from typing import Any

import numpy as np

try:  # the compiled int64 hash index: a float's bits → its id, probed a whole array at a time
    from ivm.engines.fivm._int_index import Int64Index
except ImportError:  # no compiler at install time: floats are looked up in the dict
    Int64Index = None  # type: ignore[assignment,misc]

#: the reserved range of interned ids, ``[LOW, HIGH)``; ``LOW`` itself is never handed out (a lookup's
#: "no such value" code, absent from every index)
LOW = -(2**63)
HIGH = -(2**62)
ABSENT = LOW
_TOP = 2**63
_FTOP = 2.0**63
_FHIGH = float(HIGH)

#: types whose values never equal an int (no :func:`int` probe for them)
_NEVER_INT: frozenset[type] = frozenset({str, bytes, bytearray, type(None), datetime, date, time, timedelta, tuple})

#: types whose values are always interned (never equal to an int, never NaN): looked up without :meth:`code`
_INTERNED_ONLY: frozenset[type] = _NEVER_INT - {tuple}

NAN_MESSAGE = "NaN cannot be a key value: it equals no value, itself included (refused by name, as in tuples)"


class KeyDictionary:
    """Key values ↔ int64 codes (see the module docstring); amortized O(1) per value."""

    __slots__ = ("_floats", "_ids", "_values")

    def __init__(self) -> None:
        self._ids: dict[Any, int] = {}
        self._values: list[Any] = [None]  # index 0 is ABSENT (never a value's id)
        #: a cache in C of the interned floats met by :meth:`float_codes`: bits → id - LOW (the dict decides)
        self._floats: Any = Int64Index() if Int64Index is not None else None

    # -- coding
    def code(self, value: Any) -> int:
        """The code of ``value``, interned if it is new (raises :class:`ValueError` for NaN)."""
        t = type(value)
        if t is int:
            if HIGH <= value < _TOP:
                return value  # type: ignore[no-any-return]
        elif t is float:
            if value != value:
                raise ValueError(NAN_MESSAGE)
            if value.is_integer() and _FHIGH <= value < _FTOP:
                return int(value)
        elif t not in _NEVER_INT:
            exact = _equal_int(value)
            if exact is not None and HIGH <= exact < _TOP:
                return exact
        got = self._ids.get(value)
        if got is None:
            got = LOW + len(self._values)
            if got >= HIGH:
                raise OverflowError("more than 2**62 distinct non-int key values")
            self._ids[value] = got
            self._values.append(value)
        return got

    def find(self, value: Any) -> int:
        """The code of ``value`` if it has one (an int's is itself), else :data:`ABSENT`; never interns."""
        t = type(value)
        if t is int:
            if HIGH <= value < _TOP:
                return value  # type: ignore[no-any-return]
        elif t is float:
            if value != value:
                return ABSENT
            if value.is_integer() and _FHIGH <= value < _FTOP:
                return int(value)
        elif t not in _NEVER_INT:
            exact = _equal_int(value)
            if exact is not None and HIGH <= exact < _TOP:
                return exact
        try:
            return self._ids.get(value, ABSENT)
        except TypeError:  # an unhashable value equals no key
            return ABSENT

    def codes(self, values: Sequence[Any]) -> np.ndarray:
        """:meth:`code` of each value as an int64 array (all ints in range: one C-level pass)."""
        n = len(values)
        types = set(map(type, values))
        if types == {int}:
            try:
                out = np.fromiter(values, dtype=np.int64, count=n)
            except OverflowError:
                pass
            else:
                if out.min() >= HIGH:
                    return out
        elif types <= _INTERNED_ONLY:  # strings, bytes, dates, None: one dict lookup each, in C
            return self._dict_codes(values)
        return np.fromiter(map(self.code, values), dtype=np.int64, count=n)

    def find_many(self, values: Sequence[Any]) -> np.ndarray:
        """:meth:`find` of each value as an int64 array (:data:`ABSENT` where a value has no code)."""
        return np.fromiter(map(self.find, values), dtype=np.int64, count=len(values))

    def float_codes(self, x: np.ndarray) -> np.ndarray:
        """:meth:`code` of each float of a float64 array, vectorized: integral values in range are their
        int (``-0.0`` → 0), the others found by their bits in a compiled hash index (one C call for the
        array; the ``dict`` decides for a float the index has not met yet, so equal values keep one id) (NaN
        refused)."""
        x = np.asarray(x, dtype=np.float64)
        whole = x == np.floor(x)  # (False for NaN; True for the infinities, out of range below)
        if whole.any():
            whole &= (x >= _FHIGH) & (x < _FTOP)
            if whole.all():
                return x.astype(np.int64)
            if whole.any():
                out = np.empty(len(x), dtype=np.int64)
                out[whole] = x[whole].astype(np.int64)
                rest = np.flatnonzero(~whole)
                out[rest] = self._interned_floats(x[rest])
                return out
        return self._interned_floats(x)

    def _interned_floats(self, floats: np.ndarray) -> np.ndarray:
        """The ids of floats none of which equals an int64 (NaN refused): one probe of the bits each."""
        if self._floats is None:
            if np.isnan(floats).any():
                raise ValueError(NAN_MESSAGE)
            return self._dict_codes(floats.tolist())
        bits = floats.view(np.int64)  # (such a double has one bit pattern: the bits are the value)
        k = self._floats.get_many(bits)
        miss = np.flatnonzero(k < 0)
        if len(miss):  # floats not met here yet (NaN is never entered, so it always lands here)
            new = floats[miss]
            if np.isnan(new).any():
                raise ValueError(NAN_MESSAGE)
            k[miss] = self._dict_codes(new.tolist()) - LOW
            self._floats.set_many(bits[miss], k[miss])
        return k + LOW

    def _dict_codes(self, values: list[Any]) -> np.ndarray:
        """The ids of values that are interned whatever they are (no int equals them, no NaN), new ones added."""
        got = list(map(self._ids.get, values))
        if None in got:
            self._intern_missing(got, values)
        return np.array(got, dtype=np.int64)

    def _intern_missing(self, got: list[Any], values: list[Any]) -> None:
        """Fill the ``None`` entries of ``got`` (``dict.get`` misses) with new ids, in order of first appearance;
        only for values that are interned whatever they are (no int equal to them, no NaN).  C-level passes."""
        ids, interned = self._ids, self._values
        fresh = list(dict.fromkeys([v for v, g in zip(values, got, strict=True) if g is None]))
        base = LOW + len(interned)
        if base + len(fresh) > HIGH:
            raise OverflowError("more than 2**62 distinct non-int key values")
        ids.update(zip(fresh, range(base, base + len(fresh)), strict=True))
        interned.extend(fresh)
        got[:] = map(ids.__getitem__, values)

    # -- reading back
    def value(self, code: int) -> Any:
        """The value of a code: the int itself, or the interned value."""
        return code if code >= HIGH else self._values[code - LOW]

    def values(self, codes: Iterable[int]) -> list[Any]:
        """:meth:`value` of each code."""
        vals = self._values
        return [c if c >= HIGH else vals[c - LOW] for c in codes]

    def __len__(self) -> int:
        """Interned values (ints in the identity range are not entries)."""
        return len(self._values) - 1

    def memory(self) -> int:
        """Bytes held: the dict, the id list and the interned values themselves (measured on a sample)."""
        n = len(self)
        sample = self._values[1 : 1 + 64]
        per_value = sum(map(sys.getsizeof, sample)) / len(sample) if sample else 0.0
        floats = self._floats.nbytes if self._floats is not None else 0
        return int(sys.getsizeof(self._ids) + sys.getsizeof(self._values) + n * per_value + floats)

    # -- snapshots: the values in id order (the dict is rebuilt)
    def __getstate__(self) -> dict[str, Any]:
        return {"values": self._values[1:]}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._values = [None, *state["values"]]
        self._ids = {v: LOW + i for i, v in enumerate(self._values) if i}
        self._floats = Int64Index() if Int64Index is not None else None

    def __repr__(self) -> str:
        return f"KeyDictionary({len(self)} interned values)"


def _equal_int(value: Any) -> int | None:
    """The int equal to ``value`` under Python equality (``True``, ``Decimal(3)``, numpy ints), else ``None``;
    NaN (of any numeric type) refused by name."""
    try:
        if value != value:
            raise ValueError(NAN_MESSAGE)
    except TypeError:
        return None
    try:
        exact = int(value)
    except (TypeError, ValueError, OverflowError, ArithmeticError):
        return None
    try:
        return exact if exact == value else None
    except TypeError:
        return None
