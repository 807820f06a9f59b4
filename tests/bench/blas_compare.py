#!/usr/bin/env python3
"""Interleaved LibTorch sgemm benchmark across BLAS implementations.

Each (round, variant) is a fresh process of ./build/blasbench with LD_LIBRARY_PATH pointing at
one BLAS directory, pinned to one CPU.  Variant order rotates every round so machine noise hits
all variants equally.  Per cell we report the median over all samples (rounds x samples/process).
Usage: tests/bench/blas_compare.py [rounds=11] [samples_per_process=3] [target_ms_per_sample=30] [cpu=1]
Needs libblis4-serial installed for the BLIS rows (not part of deploy/install.sh: the
project does not use BLIS; see tests/bench/README.md, "BLAS").
BLAS_BENCH=path overrides the binary.
"""
import collections, os, statistics, subprocess, sys, tempfile

L = "/usr/lib/x86_64-linux-gnu"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXE = os.environ.get("BLAS_BENCH", os.path.join(ROOT, "build", "tests", "bench", "blas_bench"))
HERE = tempfile.mkdtemp(prefix="blas_compare_")  # scratch for the result files
ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 11
SAMPLES = sys.argv[2] if len(sys.argv) > 2 else "3"
TARGET_MS = sys.argv[3] if len(sys.argv) > 3 else "30"
CPU = sys.argv[4] if len(sys.argv) > 4 else "1"

# name -> (libblas.so.3 directory, env overrides; None value = unset that variable)
VARIANTS = collections.OrderedDict([
    ("reference", (f"{L}/blas", {})),
    ("openblas", (f"{L}/openblas-serial", {})),            # OPENBLAS_CORETYPE as inherited
    ("blis", (f"{L}/blis-serial", {})),                    # BLIS auto-detects its sub-config
    # Extras (not the system configuration): forced/auto kernel selection.
    ("blis_haswell", (f"{L}/blis-serial", {"BLIS_ARCH_TYPE": "3"})),
    ("blis_skx", (f"{L}/blis-serial", {"BLIS_ARCH_TYPE": "0"})),
    ("openblas_autocore", (f"{L}/openblas-serial", {"OPENBLAS_CORETYPE": None})),
])
MAIN = ["reference", "openblas", "blis"]


def env_for(v):
    d, extra = VARIANTS[v]
    e = dict(os.environ, LD_LIBRARY_PATH=d, OMP_NUM_THREADS="1", BLIS_ARCH_DEBUG="1")
    for k, val in extra.items():
        if val is None:
            e.pop(k, None)
        else:
            e[k] = val
    return e


def run(v, args):
    cmd = ["taskset", "-c", CPU, EXE] + args
    p = subprocess.run(cmd, env=env_for(v), capture_output=True, text=True, check=True)
    return p.stdout + p.stderr


def main():
    print("OPENBLAS_CORETYPE (inherited):", os.environ.get("OPENBLAS_CORETYPE", "<unset>"))
    # 1) Which library is really used + numerical agreement.
    for v in VARIANTS:
        out = run(v, ["check", os.path.join(HERE, f"check_{v}.bin")])
        print(f"--- {v} (LD_LIBRARY_PATH={VARIANTS[v][0]} {VARIANTS[v][1] or ''})")
        for line in out.splitlines():
            if line.startswith(("MAPPED", "SGEMM", "OPENBLAS_CORE ", "libblis", "CHECK", "THREADS")):
                print("   ", line)
    for v in VARIANTS:
        if v != "openblas":
            out = subprocess.run([EXE, "compare", os.path.join(HERE, "check_openblas.bin"),
                                  os.path.join(HERE, f"check_{v}.bin")],
                                 capture_output=True, text=True).stdout.strip()
            print(f"    {v} vs openblas: {out.split()[-1]}")

    # 2) Interleaved timing.
    samples = collections.defaultdict(list)  # (variant, shape) -> [us]
    flops = {}
    shapes = []
    names = list(VARIANTS)
    for r in range(ROUNDS):
        order = names[r % len(names):] + names[:r % len(names)]
        for v in order:
            for line in run(v, ["bench", SAMPLES, TARGET_MS]).splitlines():
                if line.startswith("R "):
                    _, shape, us, _reps, fl = line.split()
                    samples[(v, shape)].append(float(us))
                    flops[shape] = float(fl)
                    if shape not in shapes:
                        shapes.append(shape)
        print(f"round {r + 1}/{ROUNDS} done", file=sys.stderr, flush=True)

    med = {k: statistics.median(x) for k, x in samples.items()}
    n = len(next(iter(samples.values())))
    print(f"\nmedian us/call over {n} samples ({ROUNDS} rounds x {SAMPLES}); GFLOP/s in ()")
    for group in (MAIN, names):
        print("\n| shape | " + " | ".join(f"{v} us (GFLOP/s)" for v in group) + " | " +
              " | ".join(f"{v}/openblas" for v in group if v != "openblas") + " |")
        print("|---" * (2 * len(group)) + "|")
        for s in shapes:
            cells = [f"{med[(v, s)]:.1f} ({flops[s] / med[(v, s)] / 1e3:.1f})" for v in group]
            ratios = [f"{med[(v, s)] / med[('openblas', s)]:.2f}x" for v in group if v != "openblas"]
            print(f"| {s} | " + " | ".join(cells) + " | " + " | ".join(ratios) + " |")
    print("\nspread (min / median / max us) per cell:")
    for s in shapes:
        print("  " + s + ": " + "; ".join(
            f"{v} {min(samples[(v, s)]):.0f}/{med[(v, s)]:.0f}/{max(samples[(v, s)]):.0f}" for v in names))


if __name__ == "__main__":
    main()
