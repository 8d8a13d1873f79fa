"""Helpers shared by the benchmark scripts: machine description, timing, peak memory, fragments.

Every number in ``benchmarks/RESULTS.md`` is written by a script through :func:`write_fragment`;
nothing is typed in by hand. A fragment records the table, the exact command that made it, the
machine and the date (UTC).
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import resource
import shlex
import signal
import statistics
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
RESULTS_DIR = BENCH_DIR / "results"
#: Fragments of ``--quick`` runs go here (not collected into RESULTS.md).
QUICK_DIR = RESULTS_DIR / "quick"

# The !Kung protocol of DESIGN section 9 (JMLR Table 1), shared by utility_kung, sparse_kung and
# baselines: EQ hyperparameters and the height interval fixed a priori, (1, 0.01)-DP, 14 folds.
KUNG_LENGTHSCALE, KUNG_KERNEL_VARIANCE, KUNG_NOISE_VARIANCE = 15.0, 10.0, 25.0
KUNG_Y_BOUNDS = (60.0, 160.0)
KUNG_EPSILON, KUNG_DELTA = 1.0, 0.01
KUNG_N_FOLDS = 14


# ------------------------------------------------------------------------------------------
# provenance


def utc_now() -> str:
    """The current time in UTC, ISO format to the second."""
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def command_line() -> str:
    """The command that is running, as it can be re-typed from the repository root."""
    script = Path(sys.argv[0]).resolve()
    try:
        script_str = str(script.relative_to(REPO_ROOT))
    except ValueError:
        script_str = str(script)
    return shlex.join(["python", script_str, *sys.argv[1:]])


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _ram_gib() -> Optional[float]:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return None


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def gpu_names() -> List[str]:
    """Names of the GPUs TensorFlow sees (imports TensorFlow)."""
    import tensorflow as tf

    names = []
    for dev in tf.config.list_physical_devices("GPU"):
        try:
            details = tf.config.experimental.get_device_details(dev)
            names.append(str(details.get("device_name", dev.name)))
        except Exception:  # pragma: no cover - depends on the driver
            names.append(dev.name)
    return names


def machine_info(gpus: Optional[Sequence[str]] = None) -> Dict[str, Any]:
    """CPU model, cores, RAM, load, library versions and GPUs of this machine.

    ``gpus=None`` asks TensorFlow (importing it); pass a list to avoid the import.
    """
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        usable = os.cpu_count()
    try:
        load = os.getloadavg()
    except OSError:  # pragma: no cover
        load = None
    return {
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "usable_cores": usable,
        "ram_gib": _ram_gib(),
        "load_1_5_15": load,
        "os": platform.platform(),
        "python": platform.python_version(),
        "numpy": _version("numpy"),
        "scipy": _version("scipy"),
        "tensorflow": _version("tensorflow"),
        "tensorflow-probability": _version("tensorflow-probability"),
        "gpflow": _version("gpflow"),
        "dpgp_gpflow": _version("dpgp_gpflow"),
        "gpus": list(gpu_names() if gpus is None else gpus),
    }


def describe_machine(info: Dict[str, Any]) -> str:
    """One line describing the machine (for a fragment)."""
    ram = f"{info['ram_gib']:.0f} GiB RAM" if info.get("ram_gib") else "RAM unknown"
    load = info.get("load_1_5_15")
    load_str = f"load average at start {load[0]:.1f}/{load[1]:.1f}/{load[2]:.1f}" if load else ""
    gpus = ", ".join(info["gpus"]) if info.get("gpus") else "no GPU used"
    return (
        f"{info['cpu']}, {info['usable_cores']} usable of {info['cores']} logical cores, {ram}; {gpus}; "
        f"{info['os']}; Python {info['python']}, numpy {info['numpy']}, scipy {info['scipy']}, "
        f"TensorFlow {info['tensorflow']}, TFP {info['tensorflow-probability']}, GPflow {info['gpflow']}, "
        f"dpgp_gpflow {info['dpgp_gpflow']}; {load_str}"
    )


# ------------------------------------------------------------------------------------------
# timing and memory


def time_call(fn: Callable[[], Any]) -> Tuple[float, Any]:
    """Wall time (s, ``time.perf_counter``) of one call and its result."""
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def median_time(fn: Callable[[], Any], repeats: int, warmup: int = 0) -> Tuple[float, List[float], Any]:
    """Median wall time of ``repeats`` calls after ``warmup`` untimed calls.

    Returns ``(median, all times, result of the last call)``.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    out = None
    for _ in range(warmup):
        out = fn()
    times = []
    for _ in range(repeats):
        t, out = time_call(fn)
        times.append(t)
    return statistics.median(times), times, out


def peak_rss_self_bytes() -> int:
    """Peak resident set size of this process so far (bytes; Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def run_isolated(argv: Sequence[str], timeout: float, env: Optional[Dict[str, str]] = None) -> Dict[str, Any]:
    """Run ``argv`` in a fresh process; its wall time, exit code, output and *its own* peak RSS.

    Peak memory is the child's ``ru_maxrss`` from ``os.wait4`` (so each case is measured alone:
    tracemalloc does not see TensorFlow's allocations). On timeout the child's process group
    (started here, in a new session) is killed and ``timed_out`` is True.
    """
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        list(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True, cwd=str(REPO_ROOT), env=env,
    )
    # Read the pipes in threads so a chatty child cannot block on a full pipe.
    import threading

    chunks: Dict[str, List[str]] = {"out": [], "err": []}

    def drain(stream, key):
        for line in stream:
            chunks[key].append(line)

    threads = [threading.Thread(target=drain, args=(proc.stdout, "out"), daemon=True),
               threading.Thread(target=drain, args=(proc.stderr, "err"), daemon=True)]
    for th in threads:
        th.start()
    timed_out = False
    status = rusage = None
    while True:
        pid, status, rusage = os.wait4(proc.pid, os.WNOHANG)
        if pid == proc.pid:
            break
        if time.perf_counter() - t0 > timeout:
            timed_out = True
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            _, status, rusage = os.wait4(proc.pid, 0)
            break
        time.sleep(0.05)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)  # so Popen does not wait again
    for th in threads:
        th.join(timeout=5)
    return {
        "returncode": proc.returncode,
        "timed_out": timed_out,
        "wall_s": wall,
        "maxrss_bytes": rusage.ru_maxrss * 1024,
        "stdout": "".join(chunks["out"]),
        "stderr": "".join(chunks["err"]),
    }


def last_json_line(text: str) -> Optional[Dict[str, Any]]:
    """The last line of ``text`` that parses as a JSON object (how workers report)."""
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                continue
    return None


# ------------------------------------------------------------------------------------------
# formatting and fragments


def fmt(x: Any, spec: str = ".3g") -> str:
    """Format a number (or pass a string through); None prints as an en dash."""
    if x is None:
        return "–"
    if isinstance(x, str):
        return x
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int):
        return f"{x:,}".replace(",", " ") if abs(x) >= 10000 else str(x)
    return format(x, spec)


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], align: Optional[str] = None) -> str:
    """A GitHub markdown table; ``align`` is one letter per column, ``l`` or ``r`` (default: l then r)."""
    if align is None:
        align = "l" + "r" * (len(headers) - 1)
    sep = ["---:" if a == "r" else "---" for a in align]
    lines = ["| " + " | ".join(headers) + " |", "| " + " | ".join(sep) + " |"]
    for row in rows:
        lines.append("| " + " | ".join(str(c) for c in row) + " |")
    return "\n".join(lines)


def write_fragment(
    name: str,
    title: str,
    body: str,
    *,
    machine: Dict[str, Any],
    started: str,
    quick: bool = False,
    out_dir: Optional[Path] = None,
) -> Path:
    """Save a markdown fragment ``<out_dir>/<name>.md``: title, body (tables), command, machine, date.

    ``quick`` fragments go to ``results/quick/`` by default and say that they are not the result.
    """
    if out_dir is None:
        out_dir = QUICK_DIR if quick else RESULTS_DIR
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    parts = [f"## {title}", ""]
    if quick:
        parts += ["**Quick mode (a smoke test of the script, not the benchmark result).**", ""]
    parts += [
        body.strip(),
        "",
        f"- Command: `{command_line()}`",
        f"- Machine: {describe_machine(machine)}",
        f"- Started: {started}; finished: {utc_now()}",
        "",
    ]
    path = out_dir / f"{name}.md"
    path.write_text("\n".join(parts))
    return path


def quiet_tensorflow() -> None:
    """Silence TensorFlow's C++ start-up logging (set before TensorFlow is imported)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
