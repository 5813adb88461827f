#!/usr/bin/env python3
"""Writes the recorded host trees that the doctor tests read (tests/data/host/<machine>/).

Each tree holds the files trainfit reads, at their paths on the host, with the values those
machines show. The layouts follow the kernel's documentation of cpufreq, intel_pstate,
amd-pstate and cpuidle (see ../shared/reference/host-and-loader.md); `statvfs` records what
statvfs(2) said for /dev/shm. Rerun after changing a machine:

    python3 tests/data/host/make_fixtures.py
"""
import os
import shutil
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
GIB = 1 << 30


def write(root, path, text):
    full = os.path.join(root, path.lstrip("/"))
    os.makedirs(os.path.dirname(full), exist_ok=True)
    mode = "wb" if isinstance(text, bytes) else "w"
    with open(full, mode) as f:
        f.write(text)


def cpuinfo(model, mhz_by_cpu):
    blocks = []
    for cpu, mhz in enumerate(mhz_by_cpu):
        blocks.append(f"processor\t: {cpu}\nvendor_id\t: x\nmodel name\t: {model}\n"
                      f"cpu MHz\t\t: {mhz:.3f}\n")
    return "\n".join(blocks) + "\n"


def meminfo(total_gib, available_gib, swap_gib, commit_gib=None):
    kib = 1024 * 1024
    text = (f"MemTotal:       {int(total_gib * kib)} kB\n"
            f"MemFree:        {int(available_gib * kib * 0.8)} kB\n"
            f"MemAvailable:   {int(available_gib * kib)} kB\n"
            f"SwapTotal:      {int(swap_gib * kib)} kB\n")
    if commit_gib:
        limit, committed = commit_gib
        text += (f"CommitLimit:    {int(limit * kib)} kB\n"
                 f"Committed_AS:   {int(committed * kib)} kB\n")
    return text


def limits(soft, hard):
    return ("Limit                     Soft Limit           Hard Limit           Units     \n"
            "Max cpu time              unlimited            unlimited            seconds   \n"
            f"Max open files            {soft:<21}{hard:<21}files     \n")


def environ(pairs):
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/home/user", **pairs}
    return "".join(f"{k}={v}\0" for k, v in env.items())


def policy(root, cpu, files):
    for name, value in files.items():
        write(root, f"/sys/devices/system/cpu/cpufreq/policy{cpu}/{name}", f"{value}\n")


def idle_states(root, cpus, driver, governor, states):
    write(root, "/sys/devices/system/cpu/cpuidle/current_driver", driver + "\n")
    write(root, "/sys/devices/system/cpu/cpuidle/current_governor_ro", governor + "\n")
    for cpu in cpus:
        for k, (name, latency, residency) in enumerate(states):
            d = f"/sys/devices/system/cpu/cpu{cpu}/cpuidle/state{k}"
            write(root, d + "/name", name + "\n")
            write(root, d + "/latency", f"{latency}\n")
            write(root, d + "/residency", f"{residency}\n")
            write(root, d + "/disable", "0\n")


def process(root, cpus, env, nofile, pid="self", name="trainfit", threads=1, fds=0):
    """/proc/<pid>: env None leaves environ out (another user's process hides it); fds is how
    many descriptors fd/ lists."""
    write(root, f"/proc/{pid}/status",
          f"Name:\t{name}\nThreads:\t{threads}\nCpus_allowed:\tffffffff\n"
          f"Cpus_allowed_list:\t{cpus}\n")
    if env is not None:
        write(root, f"/proc/{pid}/environ", environ(env))
    write(root, f"/proc/{pid}/limits", limits(*nofile))
    for fd in range(fds):
        write(root, f"/proc/{pid}/fd/{fd}", "")


def intel_hybrid(root):
    """i7-12700K desktop with an RTX 4090 (seed 000): intel_pstate active with HWP, powersave,
    EPP balance_performance; P-cores 0-15 (8 cores x 2 threads), E-cores 16-19."""
    model = "12th Gen Intel(R) Core(TM) i7-12700K"
    cur_mhz = [1700, 3500, 2200, 1800, 3400, 1900, 2600, 1700, 3100, 2000, 2400, 1750, 3300,
               1900, 2100, 1800, 1200, 1400, 1100, 1300]
    write(root, "/proc/cpuinfo", cpuinfo(model, cur_mhz))
    write(root, "/sys/devices/system/cpu/online", "0-19\n")
    write(root, "/sys/devices/cpu_core/cpus", "0-15\n")
    write(root, "/sys/devices/cpu_atom/cpus", "16-19\n")
    for name, value in {"status": "active", "no_turbo": 0, "max_perf_pct": 100,
                        "min_perf_pct": 16, "hwp_dynamic_boost": 0}.items():
        write(root, f"/sys/devices/system/cpu/intel_pstate/{name}", f"{value}\n")
    for cpu in range(20):
        p_core = cpu < 16
        hw_max = (5000000 if cpu in (8, 9) else 4900000) if p_core else 3800000
        policy(root, cpu, {
            "affected_cpus": cpu, "related_cpus": cpu,
            "scaling_driver": "intel_pstate", "scaling_governor": "powersave",
            "scaling_available_governors": "performance powersave",
            "energy_performance_preference": "balance_performance",
            "energy_performance_available_preferences":
                "default performance balance_performance balance_power power",
            "cpuinfo_min_freq": 800000, "cpuinfo_max_freq": hw_max,
            "scaling_min_freq": 800000, "scaling_max_freq": hw_max,
            "scaling_cur_freq": cur_mhz[cpu] * 1000,
            "base_frequency": 3600000 if p_core else 2700000,
        })
        write(root, f"/sys/devices/system/cpu/cpu{cpu}/cpufreq/scaling_cur_freq",
              f"{cur_mhz[cpu] * 1000}\n")
    idle_states(root, [0], "intel_idle", "menu",
                [("POLL", 0, 0), ("C1", 1, 1), ("C1E", 2, 4), ("C6", 220, 600),
                 ("C8", 280, 800), ("C10", 680, 2000)])
    process(root, "0-19", {}, (1024, 1048576))
    # The trainer, started as the fixes say: pinned to the P-cores, one OpenMP thread each.
    process(root, "0-15", {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}, (1024, 1048576),
            pid=4242, name="python3", threads=23, fds=12)
    # Another user's trainer: its environment and descriptors are not readable.
    process(root, "0-19", None, (1024, 1048576), pid=4343, name="python3", threads=9)
    write(root, "/proc/meminfo", meminfo(31.2, 24.6, 2))
    write(root, "/statvfs", f"/dev/shm {16 * GIB} {16 * GIB - (12 << 20)}\n")


def amd_server(root):
    """EPYC 9124 server (16 cores, 32 threads) with two H100s: amd-pstate-epp active,
    performance/EPP performance, but boost off; the job runs in a container on CPUs 0-7 with
    OMP_NUM_THREADS=32; tuned throughput-performance; PM QoS readable (root) with no request."""
    model = "AMD EPYC 9124 16-Core Processor"
    write(root, "/proc/cpuinfo", cpuinfo(model, [3000.0] * 32))
    write(root, "/sys/devices/system/cpu/online", "0-31\n")
    write(root, "/sys/devices/system/cpu/amd_pstate/status", "active\n")
    write(root, "/sys/devices/system/cpu/cpufreq/boost", "0\n")
    for cpu in range(32):
        policy(root, cpu, {
            "affected_cpus": cpu, "related_cpus": cpu,
            "scaling_driver": "amd-pstate-epp", "scaling_governor": "performance",
            "scaling_available_governors": "performance powersave",
            "energy_performance_preference": "performance",
            "cpuinfo_min_freq": 400000, "cpuinfo_max_freq": 3000000,
            "scaling_min_freq": 400000, "scaling_max_freq": 3000000,
            "scaling_cur_freq": 3000000,
            "amd_pstate_max_freq": 3711000, "amd_pstate_lowest_nonlinear_freq": 1500000,
        })
        write(root, f"/sys/devices/system/cpu/cpu{cpu}/cpufreq/scaling_cur_freq", "3000000\n")
    idle_states(root, [0], "acpi_idle", "menu",
                [("POLL", 0, 0), ("C1", 1, 2), ("C2", 400, 800)])
    write(root, "/dev/cpu_dma_latency", struct.pack("<i", 2000000000))
    write(root, "/etc/tuned/active_profile", "throughput-performance\n")
    process(root, "0-7", {"OMP_NUM_THREADS": "32", "CUDA_VISIBLE_DEVICES": "0,1"},
            (1048576, 1048576))
    write(root, "/proc/meminfo", meminfo(377.5, 351.0, 0, commit_gib=(188.8, 12.5)))
    write(root, "/proc/sys/vm/overcommit_memory", "0\n")
    write(root, "/proc/sys/vm/max_map_count", "262144\n")
    write(root, "/proc/self/cgroup", "12:memory:/\n4:cpu,cpuacct:/\n")
    write(root, "/sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n")
    write(root, "/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us", "-1\n")
    write(root, "/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us", "100000\n")
    write(root, "/statvfs", f"/dev/shm {189 * GIB} {180 * GIB}\n")


def cloud_vm(root):
    """A cloud VM running a Docker container: no cpufreq, no cpuidle states, Docker's 64 MiB
    /dev/shm, thread variables set, no NVIDIA driver visible; the container's cgroup (v2) limits
    memory to 16 GiB and CPU to 4 cores, and the VM runs strict overcommit."""
    model = "Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz"
    write(root, "/proc/cpuinfo", cpuinfo(model, [2899.970] * 8))
    write(root, "/sys/devices/system/cpu/online", "0-7\n")
    os.makedirs(os.path.join(root, "sys/devices/system/cpu/cpufreq"), exist_ok=True)
    write(root, "/sys/devices/system/cpu/cpuidle/current_driver", "none\n")
    process(root, "0-7", {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}, (65536, 65536))
    write(root, "/proc/meminfo", meminfo(62.8, 58.1, 0, commit_gib=(31.4, 4.2)))
    write(root, "/statvfs", f"/dev/shm {64 << 20} {63 << 20}\n")
    write(root, "/proc/sys/vm/overcommit_memory", "2\n")
    write(root, "/proc/sys/vm/max_map_count", "65530\n")
    write(root, "/proc/self/cgroup", "0::/docker/4f1c\n")
    write(root, "/sys/fs/cgroup/docker/4f1c/memory.max", f"{16 * GIB}\n")
    write(root, "/sys/fs/cgroup/docker/4f1c/cpu.max", "400000 100000\n")


def main():
    for name, make in [("intel_hybrid", intel_hybrid), ("amd_server", amd_server),
                       ("cloud_vm", cloud_vm)]:
        root = os.path.join(HERE, name)
        shutil.rmtree(root, ignore_errors=True)
        make(root)
        # Git keeps no empty directories: mark the ones whose presence is information.
        for dirpath, dirnames, filenames in os.walk(root):
            if not dirnames and not filenames:
                write(dirpath, "/.keep", "")
        print(f"wrote {root}")


if __name__ == "__main__":
    main()
