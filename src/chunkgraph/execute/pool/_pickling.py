"""How calls, results and errors cross between the pool and its workers.

Plain pickle first: it is the fastest, and sends functions and classes as a
reference (module + name) that the other side imports. Two kinds of value need
cloudpickle instead, which sends them by value (code, closure, referenced
globals):

* what plain pickle refuses: lambdas, closures, ``@task``-decorated functions;
* what plain pickle sends as a reference into ``__main__``: functions and
  classes of a script, of ``python -c`` or of a notebook. A worker never
  imports the parent's ``__main__`` (``_worker_handle``: that would run an
  unguarded script again in every worker), so such a reference could not be
  resolved there. Plain pickle spells every such reference with the bytes
  ``__main__``; a payload holding them is pickled again by value (a string
  argument that happens to say ``__main__`` only costs the slower path).

Worker side, the same rule returns results and errors whose classes came by
value: cloudpickle recognises a class it sent and gives back the original.
"""

from __future__ import annotations

import pickle

import cloudpickle  # type: ignore[import-untyped]

_MAIN_REFERENCE = b"__main__"


def dumps(value: object) -> bytes:
    """``value`` pickled so that the other process can load it without ``__main__``.

    >>> import pickle, operator
    >>> pickle.loads(dumps(operator.add))(2, 3), pickle.loads(dumps(lambda x: x + 1))(2)
    (5, 3)
    """
    try:
        data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    except (pickle.PicklingError, AttributeError, TypeError) as error:
        return _by_value(value, error)
    if _MAIN_REFERENCE in data:
        return _by_value(value, None)
    return data


def _by_value(value: object, plain_error: Exception | None) -> bytes:
    try:
        data: bytes = cloudpickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:
        if plain_error is None:
            raise
        raise plain_error from None  # the plain error names the object that failed
    return data
