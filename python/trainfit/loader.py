"""Measures a Dataset with PyTorch's own DataLoader on this host and writes a loader profile, from
which `trainfit loader` plans the DataLoader's settings before the run:

    python3 -m trainfit.loader --dataset mypkg.data:make_train_set --batch 32 --out loader.json
    trainfit loader --profile loader.json --model act --batch 32 --gpu rtx4090

or from Python, with a Dataset already built:

    profile = trainfit.loader.probe(dataset, batch_size=32, seconds=30)

In a bounded time (--seconds, 30 by default) it measures:
  - the Dataset's memory: the main process before and after building it (PSS and USS from
    /proc/PID/smaps_rollup), how much of it is Python objects (count, bytes) and how much flat
    buffers (NumPy arrays, tensors, memory-mapped files);
  - each sample's fetch time, the first time an index is read and again warm, its bytes;
  - collate and pin time of a batch and the batch's tensors and bytes;
  - real DataLoader runs at a few worker counts: samples per second, worker start-up, each
    worker's private memory (USS) at its first batch and at the end, the main process's PSS,
    and the threads a worker runs;
  - the host's limits: cores and affinity, memory, commit limit and overcommit mode, cgroup
    limits, /dev/shm, vm.max_map_count, open-file and address-space limits.

It never hangs: a Dataset that raises, a worker that dies or a sample slower than the budget ends
the probe with one line and a partial profile ("complete": false), exit status 1.
"""
import argparse
import contextlib
import gc
import importlib
import json
import mmap
import multiprocessing
import os
import random
import resource
import signal
import statistics
import sys
import tempfile
import time
import types
from typing import Any, Callable, ContextManager, Dict, Iterator, List, Optional, Sequence, Tuple

from ._specs import UsageError, load_callable, parse_kwargs

FORMAT = "trainfit-loader-profile"
VERSION = 1

THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                    "NUMEXPR_NUM_THREADS", "VECLIB_MAXIMUM_THREADS")


class Stopped(Exception):
    """The probe ended early; the message is the one line that says why."""


# ----------------------------------------------------------------------------------------------
# The host and its processes, as /proc and /sys show them.

def _read(path: str) -> Optional[str]:
    """A file's text, or None when it cannot be read."""
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def _int_or_none(text: Optional[str]) -> Optional[int]:
    """An integer from text (None, empty or 'max' -> None)."""
    if text is None:
        return None
    text = text.strip()
    if text in ("", "max"):
        return None
    try:
        return int(text)
    except ValueError:
        return None


def _cpu_list(text: Optional[str]) -> List[int]:
    """ "0-3,8" -> [0, 1, 2, 3, 8]; [] when absent."""
    cpus: List[int] = []
    for part in (text or "").strip().split(","):
        if not part:
            continue
        first, _, last = part.partition("-")
        try:
            cpus.extend(range(int(first), int(last or first) + 1))
        except ValueError:
            return []
    return cpus


def _kv_bytes(text: Optional[str], scale: int = 1024) -> Dict[str, int]:
    """ "Key:   123 kB" lines -> {"Key": 123 * 1024}."""
    out: Dict[str, int] = {}
    for line in (text or "").splitlines():
        key, _, rest = line.partition(":")
        fields = rest.split()
        if fields and fields[0].isdigit():
            out[key.strip()] = int(fields[0]) * (scale if len(fields) > 1 else 1)
    return out


def process_memory(pid: Any = "self") -> Optional[Dict[str, int]]:
    """One process's memory as the kernel counts it: PSS (shared pages split among the processes
    that map them), USS (its private pages), RSS, and the address-space sizes."""
    rollup = _kv_bytes(_read(f"/proc/{pid}/smaps_rollup"))
    if "Pss" not in rollup:
        return None
    status = _kv_bytes(_read(f"/proc/{pid}/status"))
    mem = {
        "rss_bytes": rollup.get("Rss", 0),
        "pss_bytes": rollup["Pss"],
        "uss_bytes": rollup.get("Private_Clean", 0) + rollup.get("Private_Dirty", 0),
        "anon_bytes": rollup.get("Anonymous", 0),
        "pss_shmem_bytes": rollup.get("Pss_Shmem", 0),
        "vm_size_bytes": status.get("VmSize", 0),
        "vm_data_bytes": status.get("VmData", 0),
    }
    try:
        mem["open_fds"] = len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        pass
    maps = _read(f"/proc/{pid}/maps")
    if maps is not None:
        mem["maps"] = maps.count("\n")
    return mem


def _os_threads() -> Optional[int]:
    """This process's threads (/proc/self/status)."""
    return _kv_bytes(_read("/proc/self/status")).get("Threads")


def _cgroup_limits() -> Dict[str, Any]:
    """This process's cgroup memory limit and use, and its CPU quota in cores (v2, else v1)."""
    limits: Dict[str, Any] = {"memory_max": None, "memory_current": None, "cpu_quota": None}
    v1: Dict[str, str] = {}
    for line in (_read("/proc/self/cgroup") or "").splitlines():
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hierarchy == "0" and not controllers:
            v2 = "/sys/fs/cgroup" + path.strip()
            if os.path.exists(v2 + "/memory.max"):
                limits["memory_max"] = _int_or_none(_read(v2 + "/memory.max"))
                limits["memory_current"] = _int_or_none(_read(v2 + "/memory.current"))
                quota, _, period = (_read(v2 + "/cpu.max") or "max").partition(" ")
                if quota.strip() != "max" and _int_or_none(period):
                    limits["cpu_quota"] = int(quota) / int(period)
                return limits
        for c in controllers.split(","):
            v1[c] = path.strip()
    if "memory" in v1:
        folder = f"/sys/fs/cgroup/memory{v1['memory']}"
        limit = _int_or_none(_read(folder + "/memory.limit_in_bytes"))
        limits["memory_max"] = limit if limit is not None and limit < (1 << 62) else None
        limits["memory_current"] = _int_or_none(_read(folder + "/memory.usage_in_bytes"))
    if "cpu" in v1:
        folder = f"/sys/fs/cgroup/cpu{v1['cpu']}"
        quota_us = _int_or_none(_read(folder + "/cpu.cfs_quota_us"))
        period_us = _int_or_none(_read(folder + "/cpu.cfs_period_us"))
        if quota_us is not None and quota_us > 0 and period_us:
            limits["cpu_quota"] = quota_us / period_us
    return limits


def _physical_cores(cpus: Sequence[int]) -> int:
    """Distinct physical cores among these CPUs (hyperthreads count once)."""
    cores = set()
    for cpu in cpus:
        topology = f"/sys/devices/system/cpu/cpu{cpu}/topology/"
        core = _int_or_none(_read(topology + "core_id"))
        package = _int_or_none(_read(topology + "physical_package_id"))
        if core is None:
            return len(cpus)
        cores.add((package, core))
    return len(cores)


def host_facts(start_method: str) -> Dict[str, Any]:
    """What the planner needs to know of this host: cores, memory, limits, shared memory, start
    method."""
    import torch

    affinity = sorted(os.sched_getaffinity(0))
    meminfo = _kv_bytes(_read("/proc/meminfo"))
    host: Dict[str, Any] = {
        "logical_cpus": os.cpu_count(),
        "affinity": affinity,
        "physical_cores": _physical_cores(affinity),
        "p_cores": _cpu_list(_read("/sys/devices/cpu_core/cpus")),
        "e_cores": _cpu_list(_read("/sys/devices/cpu_atom/cpus")),
        "mem_total_bytes": meminfo.get("MemTotal"),
        "mem_available_bytes": meminfo.get("MemAvailable"),
        "swap_total_bytes": meminfo.get("SwapTotal"),
        "commit_limit_bytes": meminfo.get("CommitLimit"),
        "committed_as_bytes": meminfo.get("Committed_AS"),
        "overcommit_memory": _int_or_none(_read("/proc/sys/vm/overcommit_memory")),
        "overcommit_ratio": _int_or_none(_read("/proc/sys/vm/overcommit_ratio")),
        "max_map_count": _int_or_none(_read("/proc/sys/vm/max_map_count")),
        "cgroup_memory_max_bytes": None,
        "cgroup_memory_current_bytes": None,
        "cgroup_cpu_quota": None,
        "shm_total_bytes": None,
        "shm_free_bytes": None,
        "nofile_soft": None,
        "nofile_hard": None,
        "address_space_limit_bytes": None,
        "start_method": start_method,
        "sharing_strategy": torch.multiprocessing.get_sharing_strategy(),
        "torch_threads": torch.get_num_threads(),
        "thread_env": {k: os.environ[k] for k in THREAD_VARIABLES if k in os.environ},
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "cuda": torch.cuda.is_available(),
    }
    cgroup = _cgroup_limits()
    host["cgroup_memory_max_bytes"] = cgroup["memory_max"]
    host["cgroup_memory_current_bytes"] = cgroup["memory_current"]
    host["cgroup_cpu_quota"] = cgroup["cpu_quota"]
    try:
        shm = os.statvfs("/dev/shm")
        host["shm_total_bytes"] = shm.f_blocks * shm.f_frsize
        host["shm_free_bytes"] = shm.f_bavail * shm.f_frsize
    except OSError:
        pass
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    host["nofile_soft"] = None if soft == resource.RLIM_INFINITY else soft
    host["nofile_hard"] = None if hard == resource.RLIM_INFINITY else hard
    as_soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if as_soft != resource.RLIM_INFINITY:
        host["address_space_limit_bytes"] = as_soft
    return host


# ----------------------------------------------------------------------------------------------
# What a Dataset, a sample and a batch are made of.

def _storage_of(t: Any) -> Tuple[int, int]:
    """A tensor's storage: (its address, its bytes). A view ships its whole storage."""
    storage = t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()
    nbytes = storage.nbytes() if callable(getattr(storage, "nbytes", None)) else \
        storage.size() * t.element_size()
    return storage.data_ptr(), nbytes


def _array_owner(a: Any) -> Any:
    """The array that owns a NumPy view's memory."""
    while getattr(a, "base", None) is not None and hasattr(a.base, "base"):
        a = a.base
    return a


_SKIPPED = (types.ModuleType, type, types.FunctionType, types.BuiltinFunctionType,
            types.MethodType, types.CodeType, types.FrameType)


_SAMPLED = 1024  # a container with more items than this is measured on this many of them


def _referents(o: Any, weight: float) -> List[Tuple[Any, float]]:
    """What `o` refers to, each with the share of the whole it stands for: a large list, tuple,
    set or dict is measured on an even sample of its items, each weighing len / sample."""
    if isinstance(o, (list, tuple, set, frozenset, dict)) and len(o) > 2 * _SAMPLED:
        items = list(o.items()) if isinstance(o, dict) else list(o)
        stride = len(items) / _SAMPLED
        picked = [items[int(i * stride)] for i in range(_SAMPLED)]
        if isinstance(o, dict):
            picked = [x for pair in picked for x in pair]
        return [(x, weight * stride) for x in picked]
    return [(x, weight) for x in gc.get_referents(o)]


def inventory(root: Any, budget_s: float) -> Dict[str, Any]:
    """Everything reachable from `root` (the Dataset), split into Python objects (whose reference
    counts a forked worker writes, copying their pages) and flat buffers (NumPy arrays and
    tensors, whose data pages stay shared), plus memory-mapped bytes (file pages). Large
    containers are sampled, so the counts are estimates ("sampled": true)."""
    import torch
    try:
        import numpy
        ndarray: Any = numpy.ndarray
    except ImportError:
        ndarray = ()
    seen = set()
    owners = set()
    stack: List[Tuple[Any, float]] = [(root, 1.0)]
    totals = {"python_objects": 0.0, "python_object_bytes": 0.0, "flat_buffers": 0.0,
              "flat_buffer_bytes": 0.0, "tensors": 0.0, "tensor_bytes": 0.0, "mapped_bytes": 0.0}
    deadline = time.monotonic() + budget_s
    visited = 0
    complete = True
    sampled = False

    def buffer(key: Any, nbytes: int, weight: float, tensor: bool) -> None:
        """Counts a memory owner once, with the weight of the sample that reached it."""
        if key in owners:
            return
        owners.add(key)
        totals["flat_buffers"] += weight
        totals["flat_buffer_bytes"] += nbytes * weight
        if tensor:
            totals["tensor_bytes"] += nbytes * weight

    while stack:
        o, weight = stack.pop()
        if id(o) in seen:
            continue
        seen.add(id(o))
        if isinstance(o, _SKIPPED):
            continue
        if isinstance(o, torch.Tensor):
            totals["tensors"] += weight
            key, nbytes = _storage_of(o)
            buffer(key, nbytes, weight, True)
            continue
        if isinstance(o, ndarray):
            owner = _array_owner(o)
            if isinstance(getattr(owner, "base", None), mmap.mmap):
                if id(owner) not in owners:
                    owners.add(id(owner))
                    totals["mapped_bytes"] += owner.nbytes * weight
            else:
                buffer(id(owner), int(owner.nbytes), weight, False)
            continue
        if isinstance(o, mmap.mmap):
            totals["mapped_bytes"] += len(o) * weight
            continue
        totals["python_objects"] += weight
        totals["python_object_bytes"] += sys.getsizeof(o) * weight
        referents = _referents(o, weight)
        sampled = sampled or bool(referents and referents[0][1] != weight)
        stack.extend(referents)
        visited += 1
        if visited % 65536 == 0 and time.monotonic() > deadline:
            complete = False
            break
    found: Dict[str, Any] = {k: int(round(v)) for k, v in totals.items()}
    found["complete"] = complete
    found["sampled"] = bool(sampled)
    return found


def _leaves(x: Any) -> Iterator[Any]:
    """The tensors and arrays in a sample or batch (dicts, lists, tuples, namedtuples)."""
    import torch
    if isinstance(x, torch.Tensor):
        yield x
    elif isinstance(x, dict):
        for v in x.values():
            yield from _leaves(v)
    elif isinstance(x, (list, tuple)):
        for v in x:
            yield from _leaves(v)
    elif hasattr(x, "nbytes") and hasattr(x, "shape") and hasattr(x, "base"):
        yield x  # a NumPy array


def describe(x: Any) -> Dict[str, Any]:
    """Tensors and bytes of a sample or batch; storage_bytes counts each storage once, whole."""
    import torch
    tensor_bytes: List[int] = []
    storages: Dict[int, int] = {}
    for leaf in _leaves(x):
        if isinstance(leaf, torch.Tensor):
            tensor_bytes.append(leaf.numel() * leaf.element_size())
            key, nbytes = _storage_of(leaf)
            storages[key] = nbytes
        else:
            tensor_bytes.append(int(leaf.nbytes))
            storages[id(_array_owner(leaf))] = int(_array_owner(leaf).nbytes)
    return {"tensors": len(tensor_bytes), "bytes": sum(tensor_bytes),
            "storage_bytes": sum(storages.values()), "tensor_bytes": tensor_bytes}


def summarize(seconds: Sequence[float]) -> Optional[Dict[str, Any]]:
    """Count, mean and quantiles of a list of seconds (None when empty)."""
    if not seconds:
        return None
    ordered = sorted(seconds)

    def quantile(q: float) -> float:
        """The q-th quantile of the sorted seconds."""
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    return {"count": len(ordered), "mean_s": statistics.fmean(ordered),
            "median_s": statistics.median(ordered), "p90_s": quantile(0.9),
            "p99_s": quantile(0.99), "max_s": ordered[-1]}


# ----------------------------------------------------------------------------------------------
# Bounded stages.

class _Late(Exception):
    """The probe ran past its deadline."""


class _Deadline:
    """Raises _Late in the main thread when `seconds` pass (SIGALRM), so that a __getitem__ or
    collate slower than the budget cannot hold the probe."""

    def __init__(self, seconds: float) -> None:
        """seconds: the budget (at least a millisecond)."""
        self.seconds = max(seconds, 0.001)

    def __enter__(self) -> "_Deadline":
        """Arms the timer."""
        def late(signum: int, frame: Any) -> None:
            """The alarm fired: the probe is late."""
            raise _Late()
        self.previous = signal.signal(signal.SIGALRM, late)
        signal.setitimer(signal.ITIMER_REAL, self.seconds)
        return self

    def __exit__(self, *exc: Any) -> None:
        """Disarms the timer and restores the previous handler."""
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, self.previous)


class Probed:
    """The user's Dataset as the DataLoader sees it, plus a note from inside each worker of the
    threads it runs (written to a file per worker in `notes`, read back by the main process)."""

    def __init__(self, dataset: Any, notes: str) -> None:
        """Wraps a dataset; notes: the folder where workers write their memory."""
        self.dataset = dataset
        self.notes = notes
        self.calls = 0
        self.max_threads = 0

    def __len__(self) -> int:
        """The dataset's length."""
        return len(self.dataset)

    def __getitem__(self, index: int) -> Any:
        """The dataset's sample, noting the worker's memory now and then."""
        sample = self.dataset[index]
        self.calls += 1
        if self.calls <= 4 or self.calls % 64 == 0:
            self._note()
        return sample

    def _note(self) -> None:
        """Writes this worker's pid and memory to the notes folder."""
        import torch
        info = torch.utils.data.get_worker_info()
        if info is None:
            return
        self.max_threads = max(self.max_threads, _os_threads() or 0)
        note = {"pid": os.getpid(), "worker_id": info.id, "torch_threads": torch.get_num_threads(),
                "os_threads": self.max_threads, "samples": self.calls,
                "thread_env": {k: os.environ[k] for k in THREAD_VARIABLES if k in os.environ}}
        with open(os.path.join(self.notes, f"{os.getpid()}.json"), "w") as f:
            json.dump(note, f)


def _first_line(e: BaseException) -> str:
    """The line of an exception that says what went wrong (a worker's original error)."""
    text = str(e).strip().splitlines()
    # A worker's exception comes back as "Caught X in DataLoader worker process N." then its
    # traceback; the last line is the original exception and message.
    if text and text[0].startswith("Caught ") and len(text) > 1:
        return text[-1]
    return f"{type(e).__name__}: {text[0] if text else ''}".rstrip(": ")


def _measure_fetch(dataset: Any, batch_size: int, budget_s: float, rng: random.Random,
                   progress: Callable[[str], None]) -> Tuple[Dict[str, Any], List[Any]]:
    """Seconds per __getitem__ over random indices within the budget; the samples fetched."""
    n = len(dataset)
    wanted = min(n, max(2 * batch_size, 64))
    order = rng.sample(range(n), wanted)
    first: List[float] = []
    kept: List[Any] = []
    begin = time.monotonic()
    index = order[0]
    try:
        with _Deadline(budget_s):
            for index in order:
                t0 = time.perf_counter()
                sample = dataset[index]
                first.append(time.perf_counter() - t0)
                if len(kept) < batch_size:
                    kept.append(sample)
                if time.monotonic() - begin > budget_s * 0.8 and len(first) >= 2:
                    break
    except _Late:
        if not first:
            raise Stopped(f"dataset[{index}] took longer than the fetch budget of "
                          f"{budget_s:.1f} s; give more --seconds, or make __getitem__ cheaper")
    except Stopped:
        raise
    except Exception as e:
        raise Stopped(f"the dataset raised at index {index}: {_first_line(e)}")
    warm: List[float] = []
    try:
        with _Deadline(budget_s * 0.25):
            for index in order[:min(len(first), 16)]:
                t0 = time.perf_counter()
                dataset[index]
                warm.append(time.perf_counter() - t0)
    except _Late:
        pass
    except Exception as e:
        raise Stopped(f"the dataset raised at index {index}: {_first_line(e)}")
    sample_info = describe(kept[0]) if kept else {}
    fetch = {"first_touch": summarize(first), "warm": summarize(warm), **{
        f"sample_{k}": v for k, v in sample_info.items() if k != "tensor_bytes"}}
    progress(f"fetch: {len(first)} samples, {statistics.median(first) * 1e3:.2f} ms each "
             f"(median), {sample_info.get('bytes', 0) / 1e6:.2f} MB a sample")
    return fetch, kept


def _measure_batch(collate: Callable[[List[Any]], Any], samples: List[Any], budget_s: float,
                   progress: Callable[[str], None]) -> Dict[str, Any]:
    """Seconds to collate a batch of the fetched samples and its bytes, within the budget."""
    import torch
    times: List[float] = []
    batch: Any = None
    try:
        with _Deadline(budget_s):
            while len(times) < 20 and (sum(times) < budget_s * 0.5 or len(times) < 2):
                t0 = time.perf_counter()
                batch = collate(samples)
                times.append(time.perf_counter() - t0)
    except _Late:
        if batch is None:
            raise Stopped(f"collating one batch took longer than {budget_s:.1f} s")
    except Exception as e:
        raise Stopped(f"collate raised on a batch of {len(samples)}: {_first_line(e)}")
    info = describe(batch)
    pin = None
    if torch.cuda.is_available():
        from torch.utils.data._utils.pin_memory import pin_memory
        pins: List[float] = []
        for _ in range(5):
            t0 = time.perf_counter()
            pin_memory(batch)
            pins.append(time.perf_counter() - t0)
        pin = summarize(pins)
    progress(f"batch: {len(samples)} samples, {info['tensors']} tensors, "
             f"{info['bytes'] / 1e6:.1f} MB, collate {statistics.median(times) * 1e3:.2f} ms")
    return {"size": len(samples), "collate": summarize(times), "pin": pin, **info}


def _run_workers(probed: Probed, batch_size: int, collate: Callable[[List[Any]], Any],
                 num_workers: int, start_method: str, budget_s: float, timeout_s: float,
                 rng: random.Random) -> Dict[str, Any]:
    """A real DataLoader at `num_workers` for about `budget_s`: its rate after the first round of
    batches, the workers' start-up and their private memory at the first batch and at the end."""
    import torch
    kwargs: Dict[str, Any] = {}
    if num_workers > 0:
        kwargs = {"timeout": timeout_s, "multiprocessing_context": start_method}
    generator = torch.Generator()
    generator.manual_seed(rng.randrange(1 << 31))
    dataset: Any = probed  # a map-style dataset: __len__ and __getitem__
    loader: Any = torch.utils.data.DataLoader(dataset, batch_size=batch_size, shuffle=True,
                                              num_workers=num_workers, collate_fn=collate,
                                              drop_last=True, generator=generator, **kwargs)
    result: Dict[str, Any] = {"num_workers": num_workers, "batches": 0}
    arrivals: List[float] = []
    begin = time.perf_counter()
    it = iter(loader)
    epoch = len(loader)
    pids = [w.pid for w in getattr(it, "_workers", [])]
    first_memory: Dict[int, Optional[Dict[str, int]]] = {}
    last_memory: Dict[int, Optional[Dict[str, int]]] = {}
    sampled = begin
    try:
        deadline: ContextManager[Any] = contextlib.nullcontext()
        if num_workers == 0:
            deadline = _Deadline(budget_s + timeout_s)
        with deadline:
            # As a training loop: a batch stays alive until the next one replaces it (what the
            # allocator can reuse changes the loader's speed).
            for batch in it:
                arrivals.append(time.perf_counter())
                if len(arrivals) == 1:
                    first_memory = {pid: process_memory(pid) for pid in pids}
                # Workers exit after the epoch's last batch, so their memory is read as they go:
                # once a second (reading it costs the main process about 3 ms a worker), and at
                # the last batch, when they have fetched their whole share and are still alive
                # (an epoch may take less than a second).
                if arrivals[-1] - sampled > 1.0 or len(arrivals) == epoch:
                    last_memory = {pid: process_memory(pid) for pid in pids}
                    sampled = arrivals[-1]
                # The budget is for the steady rate: it runs from the workers' first round,
                # so a slow start-up (forking a large process) does not shorten the window.
                enough = len(arrivals) >= 2 * max(num_workers, 1) + 2
                if enough and arrivals[-1] - arrivals[max(num_workers, 1) - 1] > budget_s:
                    break
                if arrivals[-1] - begin > 3 * budget_s and len(arrivals) >= 2:
                    break
            else:
                arrivals.append(0.0)  # the epoch ended: no batches left to time receiving
            if num_workers > 0 and arrivals[-1] > 0 and len(arrivals) > num_workers:
                result["receive_s"] = _time_receiving(it, arrivals, num_workers, batch_size)
            arrivals = [a for a in arrivals if a > 0]
    except _Late:
        pass
    finally:
        for pid in pids:
            last_memory[pid] = process_memory(pid) or last_memory.get(pid)
        result["main_memory"] = process_memory()
        result["worker_memory"] = [
            {"pid": pid, "first": first_memory.get(pid), "last": last_memory.get(pid)}
            for pid in pids]
        result["batches"] = len(arrivals)
        result["seconds"] = time.perf_counter() - begin
        if arrivals:
            result["first_batch_s"] = arrivals[0] - begin
        del it
    skip = max(num_workers, 1)  # the workers' first round arrives together
    if len(arrivals) > skip and arrivals[-1] > arrivals[skip - 1]:
        result["samples_per_s"] = (len(arrivals) - skip) * batch_size / (arrivals[-1] -
                                                                         arrivals[skip - 1])
    return result


def _time_receiving(it: Any, arrivals: List[float], num_workers: int, batch_size: int) -> Optional[float]:
    """The main process's own time per batch from workers (unpickling it, receiving its shared
    memory): it waits until the prefetched batches are ready, then times taking them."""
    rate = (len(arrivals) - num_workers) / max(arrivals[-1] - arrivals[num_workers - 1], 1e-9)
    time.sleep(min(2.0, 1.2 * 2 * num_workers / max(rate, 1e-9)))
    taken: List[float] = []
    for _ in range(2 * num_workers):  # the default prefetch_factor
        t0 = time.perf_counter()
        try:
            batch = next(it)
        except StopIteration:
            break
        taken.append(time.perf_counter() - t0)
        del batch
    return statistics.median(taken) if taken else None


def _time_a_few(dataset: Any, rng: random.Random, budget_s: float) -> float:
    """Seconds per sample over up to three samples (the last two where the first, which may
    import or open things, is slow); a Stopped where the first does not finish in the budget."""
    times: List[float] = []
    index = rng.randrange(len(dataset))
    try:
        with _Deadline(budget_s):
            for _ in range(3):
                index = rng.randrange(len(dataset))
                t0 = time.perf_counter()
                dataset[index]
                times.append(time.perf_counter() - t0)
                if sum(times) > budget_s / 2:
                    break
    except _Late:
        if not times:
            raise Stopped(f"dataset[{index}] took longer than the {budget_s:.1f} s the probe "
                          "gives its first sample; give more --seconds, or make __getitem__ "
                          "cheaper")
    except Exception as e:
        raise Stopped(f"the dataset raised at index {index}: {_first_line(e)}")
    return statistics.median(times[1:] or times)


def default_worker_counts() -> List[int]:
    """Worker counts to try: 0, powers of two, and every core."""
    cores = len(os.sched_getaffinity(0))
    counts = {0, cores}
    n = 1
    while n < cores:
        counts.add(n)
        n *= 2
    return sorted(counts)


def probe(dataset: Any, batch_size: int = 32, collate_fn: Optional[Callable[..., Any]] = None,
          seconds: float = 30.0, worker_counts: Optional[Sequence[int]] = None,
          start_method: Optional[str] = None, progress: Optional[Callable[[str], None]] = None,
          construction: Optional[Dict[str, Any]] = None, seed: int = 0) -> Dict[str, Any]:
    """Measures `dataset` (map-style: __len__ and __getitem__) and returns the profile as a dict.
    A probe that ends early returns what it measured with "complete": False and "stopped": the
    reason; it never raises for the Dataset's own errors."""
    from torch.utils.data import default_collate

    say = progress or (lambda line: None)
    method = start_method or multiprocessing.get_start_method()
    collate = collate_fn or default_collate
    counts = sorted(set(worker_counts)) if worker_counts is not None else default_worker_counts()
    profile: Dict[str, Any] = {
        "format": FORMAT, "version": VERSION, "complete": False, "stopped": None,
        "settings": {"batch_size": batch_size, "seconds": seconds, "worker_counts": counts,
                     "collate": getattr(collate, "__qualname__", type(collate).__name__)},
        "host": host_facts(method),
        "dataset": {"type": type(dataset).__name__},
        "memory": {"construction": construction},
        "fetch": None, "batch": None, "workers": [], "worker_threads": None,
    }
    begin = time.monotonic()
    rng = random.Random(seed)
    try:
        if not hasattr(dataset, "__getitem__") or not hasattr(dataset, "__len__"):
            raise Stopped(f"{type(dataset).__name__} is not a map-style Dataset (it needs "
                          "__len__ and __getitem__); iterable datasets are not supported")
        try:
            length = len(dataset)
        except Exception as e:
            raise Stopped(f"len(dataset) raised {_first_line(e)}")
        profile["dataset"]["length"] = length
        if length < 1:
            raise Stopped("the dataset is empty")
        profile["memory"]["main"] = process_memory()
        found = inventory(dataset, budget_s=seconds * 0.15)
        profile["memory"]["inventory"] = found
        say(f"dataset: {length} samples, {found['python_objects']} Python objects "
            f"({found['python_object_bytes'] / 1e6:.1f} MB), {found['flat_buffers']} flat buffers "
            f"({found['flat_buffer_bytes'] / 1e6:.1f} MB)")
        if length // batch_size < 1:
            raise Stopped(f"the dataset has {length} samples, fewer than one batch of "
                          f"{batch_size}")
        # The workers fork from a main process that has loaded nothing yet, as a training
        # script's does: what the main process has allocated and freed before the fork (the
        # allocator's state the workers inherit) changes their speed. So a few samples set the
        # time limits, the runs with workers come next, and the main process's own measurements
        # last.
        one_sample = _time_a_few(dataset, rng, max(seconds * 0.1, 0.5))
        one_batch = one_sample * batch_size
        per_count = max(seconds * 0.55 / max(len(counts), 1), 0.5)
        timeout = max(10.0, 4 * one_batch + 5)
        with tempfile.TemporaryDirectory(prefix="trainfit-loader-") as notes:
            probed = Probed(dataset, notes)

            def run(n: int) -> None:
                """Times a DataLoader at n workers and keeps the result."""
                if one_batch > 3 * per_count:
                    profile["workers_skipped"] = (
                        f"one batch takes about {one_batch:.1f} s, longer than the "
                        f"{per_count:.1f} s each worker count has; the planner scales the "
                        "per-sample time instead")
                    return
                try:
                    measured = _run_workers(probed, batch_size, collate, n, method, per_count,
                                            timeout, rng)
                except Exception as e:
                    message = _first_line(e)
                    if str(e).startswith("Caught "):
                        raise Stopped(f"the dataset raised in a DataLoader worker ({n} workers): "
                                      f"{message}")
                    if "DataLoader worker" in message and "exited unexpectedly" in message:
                        raise Stopped(f"a DataLoader worker died with {n} workers: {message}")
                    if "timed out" in message:
                        raise Stopped(f"no batch came from {n} workers in {timeout:.0f} s; "
                                      "a worker is stuck or __getitem__ is far slower than "
                                      "measured")
                    raise Stopped(f"with {n} workers: {message}")
                profile["workers"].append(measured)
                rate = measured.get("samples_per_s")
                say(f"workers={n}: {measured['batches']} batches, "
                    + (f"{rate:.1f} samples/s" if rate else "too few batches for a rate"))

            for n in counts:
                if n > 0:
                    run(n)
            profile["worker_threads"] = _read_notes(notes)
            fetch_budget = max(seconds * 0.15, 0.5)
            profile["fetch"], samples = _measure_fetch(dataset, batch_size, fetch_budget, rng,
                                                       say)
            while len(samples) < batch_size:  # a batch of what was fetched, for collate's timing
                samples = samples + samples[:batch_size - len(samples)]
            profile["batch"] = _measure_batch(collate, samples, max(seconds * 0.05, 0.5), say)
            del samples
            if 0 in counts:
                run(0)
            if profile.get("workers_skipped"):
                say(profile["workers_skipped"])
        profile["workers"].sort(key=lambda r: r["num_workers"])
        profile["complete"] = True
    except Stopped as e:
        profile["stopped"] = str(e)
    profile["seconds"] = time.monotonic() - begin
    return profile


def _read_notes(folder: str) -> Optional[Dict[str, Any]]:
    """The workers' notes in a folder, merged (None when there are none)."""
    notes = []
    for name in os.listdir(folder):
        try:
            with open(os.path.join(folder, name)) as f:
                notes.append(json.load(f))
        except (OSError, ValueError):
            continue
    if not notes:
        return None
    return {"workers_seen": len(notes),
            "torch_threads": max(n["torch_threads"] for n in notes),
            "os_threads": max(n["os_threads"] for n in notes),
            "thread_env": notes[0]["thread_env"]}


def build_dataset(spec: str, kwargs: Dict[str, Any]) -> Tuple[Any, Dict[str, Any]]:
    """Calls FACTORY and measures the main process's memory before and after."""
    # torch's and NumPy's own memory is part of every process, not the Dataset's.
    for module in ("torch", "numpy"):
        try:
            importlib.import_module(module)
        except ImportError:
            pass
    gc.collect()
    before = process_memory()
    factory = load_callable(spec, "--dataset", "mypkg.data:make_train_set")
    dataset = factory(**kwargs)
    gc.collect()
    after = process_memory()
    return dataset, {"before": before, "after": after}


def main(argv: Optional[Sequence[str]] = None) -> int:
    """The command line; the exit status (2: a usage error, one line)."""
    ap = argparse.ArgumentParser(
        prog="python3 -m trainfit.loader",
        description="Measure a Dataset with PyTorch's DataLoader on this host (fetch, collate, "
                    "worker scaling, worker memory, host limits) for `trainfit loader --profile`.",
        epilog="example: python3 -m trainfit.loader --dataset mypkg.data:make_train_set "
               "--batch 32 --out loader.json; then trainfit loader --profile loader.json "
               "--step-time 80ms --batch 32")
    ap.add_argument("--dataset", required=True, metavar="PKG.MODULE:FACTORY",
                    help="a function that returns the map-style Dataset, as training builds it")
    ap.add_argument("--kwargs", metavar="JSON", help="keyword arguments for FACTORY (JSON object)")
    ap.add_argument("--collate", metavar="PKG.MODULE:FN",
                    help="the collate_fn training uses (default: PyTorch's default_collate)")
    ap.add_argument("--batch", type=int, default=32, help="batch size (default 32)")
    ap.add_argument("--seconds", type=float, default=30.0,
                    help="time budget of the whole probe (default 30)")
    ap.add_argument("--workers", metavar="N,N,...",
                    help="worker counts to run (default 0, 1, 2, 4, ... up to the cores this "
                         "process may use)")
    ap.add_argument("--start-method", choices=("fork", "spawn", "forkserver"),
                    help="the multiprocessing start method (default: this Python's default)")
    ap.add_argument("--out", required=True, metavar="FILE", help="where to write the profile")
    args = ap.parse_args(argv)

    def say(line: str) -> None:
        """A progress line on stderr."""
        print(f"probe: {line}", file=sys.stderr, flush=True)

    try:
        if args.batch < 1:
            raise UsageError(f"--batch {args.batch}: must be at least 1")
        if not (0 < args.seconds <= 3600):
            raise UsageError(f"--seconds {args.seconds:g}: must be above 0 and at most 3600")
        counts = None
        if args.workers:
            try:
                counts = [int(w) for w in args.workers.split(",")]
            except ValueError:
                counts = [-1]
            if any(c < 0 or c > 1024 for c in counts):
                raise UsageError(f"--workers '{args.workers}' is not a list of counts like 0,2,4")
        kwargs = parse_kwargs(args.kwargs, '{"root": "data"}')
        collate = load_callable(args.collate, "--collate", "mypkg.data:collate") \
            if args.collate else None
        try:
            dataset, construction = build_dataset(args.dataset, kwargs)
        except UsageError:
            raise
        except Exception as e:
            print(f"error: --dataset {args.dataset} raised {_first_line(e)}", file=sys.stderr)
            return 1
        profile = probe(dataset, batch_size=args.batch, collate_fn=collate, seconds=args.seconds,
                        worker_counts=counts, start_method=args.start_method, progress=say,
                        construction=construction)
        profile["dataset"]["spec"] = args.dataset
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    try:
        with open(args.out, "w") as f:
            json.dump(profile, f, indent=1)
            f.write("\n")
    except OSError as e:
        print(f"error: cannot write --out '{args.out}': {e.strerror}", file=sys.stderr)
        return 2
    if not profile["complete"]:
        print(f"error: the probe stopped early: {profile['stopped']} (the partial profile is in "
              f"{args.out})", file=sys.stderr)
        return 1
    print(f"wrote {args.out} in {profile['seconds']:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
