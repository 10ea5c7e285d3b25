#!/usr/bin/env python3
"""What ptxas made of each kernel, on the CPU (no GPU needed): registers, spilled bytes, stack,
and ptxas's performance notes, of which the wgmma serialisations fail the report.

Compiles each .cu file for sm_90a with `-Xptxas -v` (nvcc on PATH, or --nvcc) and prints one
row a kernel, or reads ptxas output already written (--log, `-` for stdin). Exit status 1 when
ptxas serialised a kernel's wgmma (C7510-C7516: the products then wait for each other, which
cost 23-34% where it happened before, BENCHMARKS.md) or injected a warpgroup wait (C7517);
2 when a file did not compile. A kernel change is checked here before it takes device time.

  python3 scripts/ptxas_report.py                       # the fast attention's kernels
  python3 scripts/ptxas_report.py layers/attention/cuda/fast/sm90/bwd_sm90.cu --filter Traits.64
  python3 scripts/ptxas_report.py --log build.log       # a build's output (-Xptxas -v)
"""
import argparse
import os
import re
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_FILES = [
    "layers/attention/cuda/fast/sm90/bwd_sm90.cu",
    "layers/attention/cuda/fast/sm90/fwd_sm90.cu",
    "layers/attention/cuda/fast/fast_backward.cu",
    "layers/attention/cuda/fast/fast_forward.cu",
]
# ptxas's notes that a kernel's wgmma run one after another, or wait where the code did not
# ask them to: each is a performance loss the source can avoid.
SERIALISING = {"C7510", "C7511", "C7512", "C7513", "C7514", "C7515", "C7516", "C7517"}

_ENTRY = re.compile(r"Compiling entry function '([^']+)'")
_PROPS = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")
_NOTE = re.compile(r"\((C\d{4})\)(.*?)(?:in (?:the )?function '([^']+)')?\s*$")


def parse(text):
    """Kernels in the order ptxas compiled them: dicts of name, registers, stack, spill_stores,
    spill_loads and notes (the C-codes ptxas reported for it, in order)."""
    kernels, by_name, current = [], {}, None
    pending = []  # notes that name a kernel before its entry line

    def kernel(name):  # the record of kernel `name`, made at its first mention
        if name not in by_name:
            by_name[name] = {"name": name, "registers": None, "stack": 0, "spill_stores": 0,
                             "spill_loads": 0, "notes": []}
            kernels.append(by_name[name])
        return by_name[name]

    for line in text.splitlines():
        m = _ENTRY.search(line)
        if m:
            current = kernel(m.group(1))
            continue
        m = _NOTE.search(line)
        if m and "ptxas" in line:
            code, name = m.group(1), m.group(3)
            if name:
                k = by_name.get(name)
                if k is None:
                    pending.append((name, code))
                else:
                    k["notes"].append(code)
            elif current is not None:
                current["notes"].append(code)
            continue
        if current is None:
            continue
        m = _PROPS.search(line)
        if m:
            current["stack"], current["spill_stores"], current["spill_loads"] = map(int, m.groups())
            continue
        m = _USED.search(line)
        if m:
            current["registers"] = int(m.group(1))
    for name, code in pending:
        kernel(name)["notes"].append(code)
    return kernels


def demangle(names):
    """Readable names (c++filt where there is one), without the namespaces and arguments."""
    tool = shutil.which("c++filt")
    if tool is None or not names:
        return dict(zip(names, names))
    out = subprocess.run([tool], input="\n".join(names), capture_output=True, text=True).stdout
    short = {}
    for name, pretty in zip(names, out.splitlines()):
        pretty = re.sub(r"\b[a-z_0-9]+::", "", pretty)  # namespaces
        pretty = re.sub(r"^void ", "", pretty)
        depth, cut = 0, len(pretty)
        for i, c in enumerate(pretty):  # drop the argument list: the last top-level "("
            if c in "<(":
                depth += 1
                if c == "(" and depth == 1:
                    cut = i
            elif c in ">)":
                depth -= 1
        short[name] = pretty[:cut]
    return short


def serialised(kernel):
    return [c for c in kernel["notes"] if c in SERIALISING]


def report(kernels, names, out=None):
    out = out or sys.stdout
    width = max([len(names.get(k["name"], k["name"])) for k in kernels] + [6])
    print(f"{'kernel':<{width}}  regs  spill st/ld  stack  notes", file=out)
    for k in kernels:
        regs = "-" if k["registers"] is None else str(k["registers"])
        spill = f"{k['spill_stores']}/{k['spill_loads']}"
        notes = " ".join(sorted(set(k["notes"])))
        print(f"{names.get(k['name'], k['name']):<{width}}  {regs:>4}  {spill:>11}  "
              f"{k['stack']:>5}  {notes}", file=out)
    bad = [k for k in kernels if serialised(k)]
    for k in bad:
        print(f"ptxas_report: {names.get(k['name'], k['name'])}: wgmma serialised or waited on "
              f"({' '.join(sorted(set(serialised(k))))})", file=sys.stderr)
    return 1 if bad else 0


def compile_log(path, nvcc):
    cmd = [nvcc, "-DDRIFTLESS_HAVE_CUDA=1", "-DDRIFTLESS_SM90A=1", f"-I{ROOT}",
           "-isystem=/usr/include/eigen3", "-O2", "-DNDEBUG", "-std=c++17",
           "--generate-code=arch=compute_90a,code=sm_90a", "-Xptxas", "-v", "-x", "cu", "-c",
           os.path.join(ROOT, path) if not os.path.isabs(path) else path, "-o", os.devnull]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.stderr.write(r.stdout + r.stderr)
        raise RuntimeError(f"{path}: nvcc failed (exit status {r.returncode})")
    return r.stdout + r.stderr


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*", help=f"CUDA sources (default: {', '.join(DEFAULT_FILES)})")
    ap.add_argument("--log", help="read ptxas output from this file (- for stdin) instead")
    ap.add_argument("--nvcc", default=os.environ.get("NVCC", "nvcc"))
    ap.add_argument("--filter", help="only kernels whose readable name matches this regex")
    a = ap.parse_args(argv)
    if a.log:
        text = sys.stdin.read() if a.log == "-" else open(a.log).read()
    else:
        if shutil.which(a.nvcc) is None:
            print(f"ptxas_report: no {a.nvcc} (set --nvcc or NVCC)", file=sys.stderr)
            return 2
        text = ""
        try:
            for f in a.files or DEFAULT_FILES:
                print(f"ptxas_report: compiling {f}", file=sys.stderr)
                text += compile_log(f, a.nvcc)
        except RuntimeError as e:
            print(f"ptxas_report: {e}", file=sys.stderr)
            return 2
    kernels = parse(text)
    names = demangle([k["name"] for k in kernels])
    if a.filter:
        kernels = [k for k in kernels if re.search(a.filter, names.get(k["name"], k["name"]))]
    if not kernels:
        print("ptxas_report: no kernel in the output (was it compiled with -Xptxas -v?)",
              file=sys.stderr)
        return 2
    return report(kernels, names)


if __name__ == "__main__":
    sys.exit(main())
