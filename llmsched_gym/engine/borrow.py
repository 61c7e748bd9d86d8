"""Borrowed array views for the kernels' entry points.

Numba reference-counts every array a compiled function receives: each call of a helper
that takes the state's two dozen arrays does two atomic updates per array, which is most
of the cost of a small event. The state's arrays are owned by Python objects that outlive
every kernel call, so an entry point can hand its helpers *borrowed* views instead: the
same data, shape and strides with no memory-info pointer, whose reference counting is a
null check. A borrowed view must not outlive the call that made it (never return or
store one).
"""

from __future__ import annotations

from numba import types
from numba.core import cgutils
from numba.extending import intrinsic


@intrinsic
def borrowed(typingctx, arr):
    """A view of ``arr`` without reference counting (see the module docstring)."""
    if not isinstance(arr, types.Array):
        return None

    def codegen(context, builder, sig, args):
        src = context.make_array(arr)(context, builder, value=args[0])
        view = context.make_array(arr)(context, builder)
        view.meminfo = cgutils.get_null_value(view.meminfo.type)
        view.parent = cgutils.get_null_value(view.parent.type)
        view.nitems, view.itemsize, view.data = src.nitems, src.itemsize, src.data
        view.shape, view.strides = src.shape, src.strides
        return view._getvalue()

    return arr(arr), codegen
