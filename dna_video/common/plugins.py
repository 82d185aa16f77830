"""``--import MODULE``: the user's own modules, imported before a command reads its options, so
that what they register (an attention kind, through
:func:`dna_video.models.attention.register_attention`) is known to every command:
``dna-video fit --import my_kinds --model.network.attention my_kind ...`` (docs/variants.md,
"Your own attention kind").

MODULE is a module name, found on the Python path or in the current directory, or the path of a
``.py`` file. The option may be given several times and anywhere on the command line; it is
taken out before the command sees its arguments.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

__all__ = ["IMPORT_OPTION", "import_requested", "import_module"]

IMPORT_OPTION = "--import"


def import_module(name: str) -> ModuleType:
    """Import ``name`` (a module name, or a ``.py`` file's path) as ``--import`` does. Importing
    the same module again returns it without running it twice."""
    if name.endswith(".py") or os.sep in name or (os.altsep and os.altsep in name):
        path = Path(name).resolve()
        if not path.is_file():
            raise ModuleNotFoundError(f"no such file: {path}")
        for module in list(sys.modules.values()):
            if getattr(module, "__file__", None) and Path(module.__file__).resolve() == path:
                return module
        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[path.stem] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[path.stem]
            raise
        return module
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.append(os.getcwd())  # after the installed packages: a local file never shadows one
    return importlib.import_module(name)


def import_requested(args: list[str]) -> list[str]:
    """``args`` without their ``--import MODULE`` / ``--import=MODULE`` options, each MODULE
    imported in the order given. One that does not import stops the command with one line
    naming it (``SystemExit``, status 1); ``DNA_VIDEO_TRACEBACK=1`` shows the traceback."""
    out, names = [], []
    position = 0
    while position < len(args):
        arg = args[position]
        if arg == IMPORT_OPTION:
            if position + 1 >= len(args) or args[position + 1].startswith("-"):
                raise SystemExit(f"error: {IMPORT_OPTION} needs a module name or a .py file")
            names.append(args[position + 1])
            position += 2
            continue
        if arg.startswith(IMPORT_OPTION + "="):
            names.append(arg.partition("=")[2])
        else:
            out.append(arg)
        position += 1
    for name in names:
        try:
            import_module(name)
        except Exception as exc:
            if os.environ.get("DNA_VIDEO_TRACEBACK") == "1":
                raise
            raise SystemExit(f"error: {IMPORT_OPTION} {name}: {type(exc).__name__}: {exc} "
                             "(set DNA_VIDEO_TRACEBACK=1 for the traceback)") from None
    return out
