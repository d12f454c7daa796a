"""Kernel names a person can read: the readable core of a C++ template kernel name.

`void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctorOnSelf_add<float>,
std::array<char*, 2ul> >(int, ...)` is shown as
`vectorized_elementwise_kernel<CUDAFunctorOnSelf_add>`: the kernel's own name (the last part
of its qualified name) and, from its template arguments, the name that says what it computes
(the functor, or the operator's kernel function a lambda came from). Names without templates
(`nvjet_...`, Triton's `triton_poi_fused_...`) stay as they are. A table's short names stay
distinct: two kernels whose cores are the same keep every such name of their arguments, and
where even those are the same, a number.

The full name stays in JSON, and in HTML on hover.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

#: The longest short name shown.
SHORT_WIDTH = 110
#: An identifier, possibly qualified (`at::native::MulFunctor`).
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:::[A-Za-z_][A-Za-z0-9_]*)*")
#: The names in template arguments that say what a kernel computes: a functor, an
#: operator's kernel function (a lambda's enclosing function, `sin_kernel_cuda(...)::{lambda`),
#: never a type (`cudnnKernelDataType_t`).
_TELLING = re.compile(r"Functor|functor|_kernel|Kernel|Op$|_op$|Func$|Math")
_TYPE = re.compile(r"_t$|Type|^(?:operator|decltype|sizeof)$")
#: A function named in an argument (the function a lambda came from).
_CALLED = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\(")
#: Kernel names that say nothing alone (CUTLASS's `Kernel2<gemm_...>`): their first template
#: argument is the kernel.
_GENERIC = {"Kernel", "Kernel2", "device_kernel", "kernel", "cutlass_kernel"}


def _split(name: str) -> tuple[str, list[str]]:
    """(the kernel's own name, its top-level template arguments)."""
    text = name.strip().replace("(anonymous namespace)::", "")
    if text.startswith("void "):
        text = text[5:]
    depth = 0
    base_end = len(text)
    for i, ch in enumerate(text):
        if ch in "<(" and depth == 0:
            base_end = i
            break
    base = text[:base_end].split("::")[-1].strip()
    if base_end >= len(text) or text[base_end] != "<":
        return base, []
    args: list[str] = []
    start = base_end + 1
    for i in range(base_end, len(text)):
        ch = text[i]
        if ch in "<([{":
            depth += 1
        elif ch in ">)]}":
            depth -= 1
            if depth == 0:
                args.append(text[start:i].strip())
                break
        elif ch == "," and depth == 1:
            args.append(text[start:i].strip())
            start = i + 1
    return base, args


def _telling(arg: str) -> list[str]:
    """The telling names in one template argument (unqualified), in order."""
    out = []
    for m in _IDENT.finditer(arg):
        last = m.group(0).split("::")[-1]
        if _TELLING.search(last) and not _TYPE.search(last) and last not in out:
            out.append(last)
    if not out:
        out = [f for f in _CALLED.findall(arg) if not _TYPE.search(f)][:1]
    return out


#: A C++ kernel signature: a (qualified) name right before its template or argument list.
_SIGNATURE = re.compile(r"^(?:void )?[A-Za-z_][\w:]*(?:\(anonymous namespace\)::[\w:]*)*[<(]")


def _forms(name: str) -> tuple[str, str]:
    """(short, longer) forms of one name; a name that is not a C++ signature as it is."""
    if not _SIGNATURE.match(name.strip()):
        return name, name
    base, args = _split(name)
    if not re.fullmatch(r"[A-Za-z_]\w*", base):
        return name, name
    if not args:
        return base or name, base or name
    if base in _GENERIC:
        inner, _ = _split(args[0])
        return f"{base}<{inner}>", f"{base}<{inner}>"
    told = [t for arg in args for t in _telling(arg)]
    if not told:
        return base, base
    # the innermost telling name of the first argument that has one: the functor inside a
    # wrapper (AUnaryFunctor<..., MulFunctor<float>> is a multiplication)
    first = next(t for t in (_telling(a) for a in args) if t)
    return f"{base}<{first[-1]}>", f"{base}<{', '.join(told)}>"


def short_names(names: Sequence[str]) -> list[str]:
    """Each name's short form (module docstring), distinct across `names` where the names
    are, each at most SHORT_WIDTH characters."""
    forms = [_forms(n) for n in names]
    short = [_cut(s) for s, _ in forms]
    for picked in (0, 1):
        seen: dict[str, set[str]] = {}
        for full, s in zip(names, short, strict=True):
            seen.setdefault(s, set()).add(full)
        if all(len(v) == 1 for v in seen.values()):
            return short
        if picked == 0:
            short = [
                _cut(longer) if len(seen[s]) > 1 else s
                for s, (_, longer) in zip(short, forms, strict=True)
            ]
    counts: dict[str, int] = {}
    numbered: dict[str, str] = {}
    out = []
    for full, s in zip(names, short, strict=True):
        if full not in numbered:
            counts[s] = counts.get(s, 0) + 1
            numbered[full] = s if counts[s] == 1 else f"{s} #{counts[s]}"
        out.append(numbered[full])
    return out


def _cut(text: str) -> str:
    return text if len(text) <= SHORT_WIDTH else text[: SHORT_WIDTH - 1] + "…"
