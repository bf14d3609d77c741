"""The process's resident memory as the benchmarks measure it (Linux /proc)."""


def rss_mib(field):
    """VmRSS (now) or VmHWM (peak since the last reset) in MiB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def reset_peak_rss():
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets VmHWM to the current resident size
