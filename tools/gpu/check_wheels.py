#!/usr/bin/env python3
"""Checks, before any device time is spent, that a folder of wheels installs and imports on the GPU
machine with pip --no-index --no-deps: every requirement of every wheel (its METADATA's Requires-Dist,
less those of extras) is either one of the wheels or a package the machine already has.

  check_wheels.py WHEELS_DIR "NAME NAME ..."   # exit 0, or exit 1 naming each requirement met by neither
"""
import glob
import os
import re
import sys
import zipfile


def normalized(name):
    """PEP 503's form: huggingface_hub, Huggingface-Hub and huggingface.hub are one package."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirements(wheel):
    with zipfile.ZipFile(wheel) as z:
        metadata = z.read(next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    for line in metadata.splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        spec = line.split(":", 1)[1].strip()
        marker = spec.split(";", 1)[1] if ";" in spec else ""
        if "extra" in marker:
            continue  # only for an extra nobody asks for
        yield spec, normalized(re.match(r"[A-Za-z0-9_.-]+", spec).group(0))


def unmet(wheels_dir, device_has):
    wheels = sorted(glob.glob(os.path.join(wheels_dir, "*.whl")))
    carried = {normalized(os.path.basename(w).split("-")[0]) for w in wheels}
    present = carried | {normalized(n) for n in device_has}
    return wheels, [f"{os.path.basename(w)} needs {spec}" for w in wheels
                    for spec, name in requirements(w) if name not in present]


def main():
    wheels_dir, device_has = sys.argv[1], sys.argv[2].split()
    wheels, missing = unmet(wheels_dir, device_has)
    if not wheels:
        sys.exit(f"check_wheels: no wheels in {wheels_dir}")
    if missing:
        sys.exit("check_wheels: error: neither carried nor on the GPU machine: " + "; ".join(missing)
                 + " (carry it as a wheel too, or, if the machine has it, name it as one it has)")
    print(f"check_wheels: every requirement of the {len(wheels)} wheels is carried or on the GPU machine")


if __name__ == "__main__":
    main()
