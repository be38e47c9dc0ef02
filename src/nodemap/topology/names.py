"""The names a Topology holds, checked once where a Topology comes from outside.

A device's name, UUID or bus id reaches a task's environment, the Slurm
plugin's task lines, launcher options, gres.conf and metric labels: a NIC
named "mlx5_0<TAB>LD_PRELOAD=/tmp/evil.so" set LD_PRELOAD in a task through
the plugin. Trusted: the live node, as the kernel and the drivers name its
devices. Not trusted: a topology read from a file (`--input`: hwloc XML,
sysfs snapshot, JSON export, check document) or held by a saved document.
Those are checked here: device names and ids are short words (text.name_problem),
every other text printable and bounded (text.text_problem); the first
problem is one InputError naming the file, the field and the name. Each
writer keeps its own last check of its syntax (docs/limits.md, "Names from outside").
"""

from __future__ import annotations

import functools

from ..errors import InputError
from ..text import name_problem, shown, text_problem
from .record import Record, fields

# (record, field) -> the grammar its names follow; every other text field is text
NAMES = {("NIC", "name"): "device", ("NIC", "netdevs"): "device", ("GPU", "os_names"): "device",
         ("GPU", "uuid"): "id", ("GPU", "mig"): "id", ("GPU", "pci_bus_id"): "id", ("NIC", "pci_bus_id"): "id",
         ("PciDevice", "bus_id"): "id", ("PciDevice", "pci_path"): "id", ("NumaNode", "pci_bus_id"): "id",
         ("Link", "a"): "id", ("Link", "b"): "id"}
REQUIRED = {("NIC", "name"), ("PciDevice", "bus_id"), ("Link", "a"), ("Link", "b")}  # never empty


def check(topo, where: str, at: str = "") -> None:
    """Raise InputError(where, ...) for the first name or text of `topo` that
    no machine gives (see the module's doc); `at` is where the topology sits
    in the file ("topology." in a check document)."""
    problem = first_problem(topo, at)
    if problem:
        raise InputError(where, f"{problem}: no machine reports such a name; the file is damaged or hostile "
                                "(fix it, or write it again with the tool that made it)")


def first_problem(topo, at: str = "") -> str:
    """"nics[0].name 'mlx5_0\\t...' holds '\\t': ..." for the first bad text of `topo`, or ""."""
    for path, value, field in _texts(topo, at):
        kind = NAMES.get(field)
        if kind is None:
            why = text_problem(value)
        else:
            why = name_problem(value, kind) or ("is empty" if not value and field in REQUIRED else "")
        if why:
            return f"{path} {shown(value)} {why}"
    return ""


def _texts(record, at: str):
    """(field path, text, (record class, field)) of every text in `record`, nested records included."""
    cls = type(record).__name__
    for field in _text_fields(type(record)):
        yield from _values(getattr(record, field), f"{at}{field}", (cls, field))


def _values(value, at: str, field: tuple[str, str]):
    if isinstance(value, str):
        yield at, value, field
    elif isinstance(value, tuple):
        for i, v in enumerate(value):
            yield from _values(v, f"{at}[{i}]", field)
    elif isinstance(value, Record):
        yield from _texts(value, f"{at}.")


@functools.lru_cache(maxsize=None)
def _text_fields(cls: type) -> tuple[str, ...]:
    """The fields of a record class that can hold text: a PU or a Core holds
    none, so a node of 100,000 PUs costs nothing to check."""
    return tuple(name for name, tp in fields(cls).items() if _holds_text(tp))


def _holds_text(tp) -> bool:
    if tp is str:
        return True
    if isinstance(tp, type) and issubclass(tp, Record):
        return bool(_text_fields(tp))
    return any(_holds_text(a) for a in getattr(tp, "__args__", ()))  # tuple[str, ...], X | None (not typing: 7 ms)
