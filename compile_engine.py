"""Compiles the engine with mypyc while pip builds kafkacheck (CMakeLists.txt runs this).

    python compile_engine.py OUT

Writes into OUT, for the wheel: each engine module compiled (``reference/broker.*.so`` and so
on, with their shared library ``kafkacheck_engine__mypyc.*.so``) and the module ``reference._built``,
the digest of the sources they were compiled from (see ``reference/compiled.py``, which lists
the modules and chooses the engine at run time). If compiling is turned off
(``KAFKACHECK_COMPILE=0 pip install ...``) or fails, OUT gets only the module ``reference._built``
saying why, the install goes on, and kafkacheck runs the Python engine: compiling is a speed-up,
never a condition (mypyc runs in a process of its own: even its crash is only a reason). About
three minutes on two cores.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent


def _compiled_module():
    """reference/compiled.py on its own (the package's init is not needed to list the modules)."""
    spec = importlib.util.spec_from_file_location("_kafkacheck_engine_list", ROOT / "reference" / "compiled.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build(out: Path, sources: list[str]) -> None:
    from mypyc.build import mypycify
    from setuptools import Distribution

    with tempfile.TemporaryDirectory(prefix="kafkacheck-mypyc-") as tmp:
        # the modules they import but that are not compiled (the real clients, the checkers) are read,
        # not judged: mypy checks what is compiled (tests/test_types.py)
        extensions = mypycify(["--ignore-missing-imports", "--follow-imports=silent", "--cache-dir", f"{tmp}/mypy",
                               *sources],
                              target_dir=f"{tmp}/c", group_name="kafkacheck_engine")
        dist = Distribution({"name": "kafkacheck-engine", "ext_modules": extensions})
        command = dist.get_command_obj("build_ext")
        command.build_lib = str(out)
        command.build_temp = f"{tmp}/o"
        dist.run_command("build_ext")


def compile_apart(out: Path, sources: list[str]) -> str:
    """Compile in a process of its own (mypyc can crash, not only fail): '' or why it did not."""
    python = [sys.executable, *(["-S"] if sys.flags.no_site else [])]  # the child runs as this one does
    child = subprocess.run([*python, __file__, "--compile", str(out), *sources])
    if child.returncode == 0:
        return ""
    if child.returncode < 0:
        return f"mypyc crashed ({signal.Signals(-child.returncode).name})"
    return f"mypyc failed (exit {child.returncode}: its errors are above)"


def main() -> int:
    if len(sys.argv) > 2 and sys.argv[1] == "--compile":  # the child: compile or fail
        try:
            build(Path(sys.argv[2]), sys.argv[3:])
        except Exception:  # mypyc reports its own errors by SystemExit
            traceback.print_exc()
            return 1
        return 0
    if len(sys.argv) != 2:
        print("usage: python compile_engine.py OUT", file=sys.stderr)
        return 3
    out = Path(sys.argv[1])
    shutil.rmtree(out, ignore_errors=True)
    (out / "reference").mkdir(parents=True)
    compiled = _compiled_module()
    modules = compiled.engine_modules(ROOT)
    digest, why = compiled.digest(ROOT), ""
    if os.environ.get("KAFKACHECK_COMPILE", "1") == "0":
        digest, why = None, "KAFKACHECK_COMPILE=0 when it was installed"
    else:
        print(f"kafkacheck: compiling the engine ({len(modules)} modules) with mypyc...", flush=True)
        t = time.perf_counter()
        why = compile_apart(out, [str(compiled.source_path(ROOT, m)) for m in modules])
        if not why and compiled.digest(ROOT) != digest:
            why = "the sources changed while they were compiled"
        if why:
            digest = None
            print(f"kafkacheck: {why}; kafkacheck will run the Python engine", flush=True)
            for built in out.rglob("*.so"):
                built.unlink()
        else:
            print(f"kafkacheck: compiled in {time.perf_counter() - t:.0f} s", flush=True)
    (out / "reference" / "_built.py").write_text(
        '"""Written by compile_engine.py when pip built kafkacheck: what reference.compiled reads."""\n\n'
        f"DIGEST = {digest!r}  # sha256 of the compiled modules' sources, or None: not compiled\n"
        f"WHY = {why!r}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
