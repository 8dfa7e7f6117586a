"""CIFAR's python-format batches, read as data: a restricted unpickler, never ``pickle.load``.

A pickle is a program: ``pickle.load`` runs whatever callable it names (a batch whose
``__reduce__`` is ``os.system`` runs a command as whoever loads it). CIFAR's batches are
pickles all the same (Python 2 cPickle dumps, protocol 2, read with ``encoding='latin1'``),
so they are loaded by an unpickler whose ``find_class`` admits only what that format holds:

- numpy arrays, through numpy's own reconstruction (``numpy.core.multiarray._reconstruct``,
  ``numpy._core.multiarray._reconstruct`` for numpy 2, ``numpy.ndarray``, ``numpy.dtype``),
  an empty array made then filled from the pickle's bytes, never of object dtype;
- ``_codecs.encode(text, 'latin1')``: how Python 3 writes ``bytes`` at protocol 2 (a
  stand-in written by ``campaign datagen``), and no other codec;
- dicts, lists, strings, bytes, integers and floats, which pickle builds without a name.

Any other name (``os.system``, ``builtins.eval``, ``subprocess.Popen``), a persistent id,
an out-of-band buffer, or a value of another type in the result is refused in one line
naming the file (``Refused``), before anything it names is called.
"""

from __future__ import annotations

import io
import pickle
from pathlib import Path
from typing import Any, Callable

from campaign_door.read import Refused, read_file

# A batch read at most: CIFAR-100's train (50,000 images) is 155 MB as downloaded, a full
# stand-in's 154 MB; CIFAR-10's are 31 MB each.
CIFAR_MAX_BYTES = 256 << 20
_LATIN1 = ("latin1", "latin-1", "iso-8859-1", "iso8859-1", "l1")


def _numpy() -> Any:
    import numpy  # lazily: the door is imported where numpy is not needed

    return numpy


def _multiarray() -> Any:
    np = _numpy()
    core = getattr(np, "_core", None) or np.core  # numpy 2 / numpy 1
    return core.multiarray


def _reconstruct() -> Callable[..., Any]:
    real, np = _multiarray()._reconstruct, _numpy()

    def reconstruct(subtype: Any, shape: Any, dtype: Any) -> Any:
        # numpy pickles an empty ndarray (shape (0,), dtype 'b') and fills it in BUILD:
        # anything else (a subclass, a size to allocate) is not what numpy writes
        if subtype is not np.ndarray or tuple(shape) != (0,):
            raise pickle.UnpicklingError("an array numpy does not write")
        return real(subtype, shape, dtype)

    return reconstruct


def _dtype() -> Callable[..., Any]:
    np = _numpy()

    def dtype(spec: Any, align: bool = False, copy: bool = False) -> Any:
        if not isinstance(spec, str):
            raise pickle.UnpicklingError("a dtype numpy does not write")
        made = np.dtype(spec, align, copy)
        if made.hasobject:
            raise pickle.UnpicklingError("an array of Python objects")
        return made

    return dtype


def _encode() -> Callable[..., Any]:
    def encode(text: Any, encoding: Any = "latin1") -> bytes:
        if not isinstance(text, str) or str(encoding).lower() not in _LATIN1:
            raise pickle.UnpicklingError("a codec other than latin1")
        return text.encode("latin1")

    return encode


ALLOWED: dict[tuple[str, str], Callable[[], Any]] = {
    ("numpy.core.multiarray", "_reconstruct"): _reconstruct,
    ("numpy._core.multiarray", "_reconstruct"): _reconstruct,
    ("numpy", "ndarray"): lambda: _numpy().ndarray,
    ("numpy", "dtype"): _dtype,
    ("_codecs", "encode"): _encode,
}


class _DataOnly(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        make = ALLOWED.get((module, name))
        if make is None:
            raise pickle.UnpicklingError(f"it names {module}.{name}"[:200])
        return make()

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError("it holds a persistent id")


def _check_values(value: Any) -> None:
    np, todo = _numpy(), [value]
    while todo:
        v = todo.pop()
        if isinstance(v, dict):
            todo.extend(v.keys())
            todo.extend(v.values())
        elif isinstance(v, list):
            todo.extend(v)
        elif isinstance(v, np.ndarray):
            if v.dtype.hasobject or type(v) is not np.ndarray:
                raise pickle.UnpicklingError("an array of Python objects")
        elif type(v) not in (str, bytes, int, float, bool) and v is not None:
            raise pickle.UnpicklingError(f"a {type(v).__name__}"[:100])


def loads_cifar(data: bytes, path: Path | str) -> dict:
    """The dict pickled in ``data`` (the file ``path``'s bytes), through the restricted
    unpickler; ``Refused`` (one line naming ``path``) for anything a CIFAR batch never holds."""
    try:
        value = _DataOnly(io.BytesIO(data), encoding="latin1").load()
        if not isinstance(value, dict):
            raise pickle.UnpicklingError(f"a {type(value).__name__}, not a dict"[:100])
        _check_values(value)
    except (pickle.UnpicklingError, ValueError, TypeError, EOFError, AttributeError, IndexError, KeyError,
            MemoryError, OverflowError, RecursionError, UnicodeError) as exc:
        why = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        raise Refused(f"{path} is not a CIFAR batch ({why}): it holds what the python-format batches never "
                      f"do, and was not loaded; re-download the data set or write its stand-in again") from None
    return value


def load_cifar(path: Path | str, max_bytes: int = CIFAR_MAX_BYTES) -> dict:
    """``loads_cifar`` of the file ``path``, read by the door (no link, at most ``max_bytes``)."""
    return loads_cifar(read_file(path, max_bytes), path)
