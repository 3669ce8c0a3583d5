"""The GPU a side-by-side ran on, for results.json (tools/bench/compare.py with a GPU scenario set):
what it is (name, memory, driver, CUDA as PyTorch was built with it) and its bfloat16 matmul rate, the
rate the runs table's train and generation GFLOP/s are set against. Needs torch with CUDA.

compare.py runs it as a script of its own (`python3 gpu_machine.py` prints one JSON object), so that
its own process holds no CUDA context beside the tools it measures."""
import json
import subprocess
import time


def describe():
    import torch
    properties = torch.cuda.get_device_properties(0)
    info = {"gpu": properties.name, "gpu_memory_mib": properties.total_memory // 2**20,
            "gpu_multiprocessors": properties.multi_processor_count, "cuda (torch)": torch.version.cuda}
    try:
        info["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                        capture_output=True, text=True, check=True).stdout.splitlines()[0].strip()
    except (OSError, subprocess.CalledProcessError, IndexError):
        info["driver"] = "unknown (no nvidia-smi)"
    return info


def matmul_gflops():
    """{"bfloat16": GFLOP/s}: the mean of ten 8192³ products after three warm-ups (as
    tools/gpu/device_check.sh measures it)."""
    import torch
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn_like(a)
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(10):
        a @ b
    torch.cuda.synchronize()
    rate = 10 * 2 * n**3 / (time.perf_counter() - start) / 1e9
    del a, b
    torch.cuda.empty_cache()
    return {"bfloat16": rate}


if __name__ == "__main__":
    print(json.dumps({**describe(), "matmul_gflops": matmul_gflops()}))
