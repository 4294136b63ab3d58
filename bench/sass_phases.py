#!/usr/bin/env python3
"""Where a kernel's warps spend their time, per phase of its code.

Nsight Compute's source page (warp stall samples and executions per SASS
instruction) does not say which code is the K/V loop, which runs once per
query block (first step, bound tile, epilogue) and which is the producer.
The execution count does: an instruction of the loop runs tiles-per-block
times as often as one of the per-block code. This script groups the
instructions by execution count, sums their stall samples, and for chosen
counts lists the hottest runs of consecutive instructions with their stall
reasons, so two kernels (a window kernel against the dense one) can be
compared phase by phase.

    ncu --section SourceCounters -o rep ... flashjit run ...
    ncu -i rep.ncu-rep --page source --csv --print-source sass | gzip > k.csv.gz
    python3 bench/sass_phases.py k.csv.gz                  # by execution count
    python3 bench/sass_phases.py k.csv.gz --execs 16384,8064 --top 12
    python3 bench/sass_phases.py k.csv.gz --loop 105728 --block 16384
        # each group's samples in loop iterations per block: the loop's
        # instructions ran 105728 times, once-per-block code 16384 times
    python3 bench/sass_phases.py --self-test   # a made-up report, checked
"""
import argparse
import collections
import csv
import gzip
import sys


def load(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        rows = list(csv.reader(f))
    # Row 0 names the kernel; row 1 is the header.
    header, data = rows[1], rows[2:]
    samples = header.index("Warp Stall Sampling (All Samples)")
    executed = header.index("Instructions Executed")
    reasons = [i for i, h in enumerate(header)
               if h.startswith("stall_") and "Not Issued" not in h]
    out = []
    for r in data:
        try:
            s, e = int(r[samples]), int(r[executed])
        except (ValueError, IndexError):
            continue
        why = {header[i][len("stall_"):]: int(r[i] or 0) for i in reasons}
        out.append({"address": r[0], "sass": r[1].strip(), "samples": s,
                    "executed": e, "reasons": why})
    return out


def by_execution_count(instrs, top):
    total = sum(i["samples"] for i in instrs) or 1
    groups = collections.defaultdict(lambda: [0, 0])
    for i in instrs:
        groups[i["executed"]][0] += 1
        groups[i["executed"]][1] += i["samples"]
    print(f"{total} stall samples")
    print("executions | instructions | samples | share")
    for e, (n, s) in sorted(groups.items(), key=lambda x: -x[1][1])[:top]:
        print(f"{e:10d} | {n:5d} | {s:7d} | {s / total:6.1%}")


def in_loop_iterations(instrs, loop, block, top):
    """Each group's samples as loop iterations' worth per block: the loop's
    samples over its iterations per block (loop / block executions) are
    one iteration's worth."""
    groups = collections.Counter()
    for i in instrs:
        groups[i["executed"]] += i["samples"]
    iterations = loop / block
    per_iteration = groups[loop] / iterations if groups[loop] else 0
    if not per_iteration:
        sys.exit(f"no samples in instructions executed {loop} times")
    print(f"{iterations:.2f} loop iterations per block, "
          f"{per_iteration:.0f} samples each")
    print("executions | samples | loop iterations per block")
    for e, s in sorted(groups.items(), key=lambda x: -x[1])[:top]:
        if e != loop:
            print(f"{e:10d} | {s:7d} | {s / per_iteration:.2f}")


def runs_of(instrs, execs, top):
    chosen = [(k, i) for k, i in enumerate(instrs) if i["executed"] in execs]
    total = sum(i["samples"] for _, i in chosen) or 1
    reasons = collections.Counter()
    for _, i in chosen:
        reasons.update(i["reasons"])
    print(f"{total} samples in instructions executed {sorted(execs)} times")
    print("reasons: " + ", ".join(f"{k} {v / total:.0%}"
                                  for k, v in reasons.most_common(8)))
    runs = []
    for k, i in chosen:
        if runs and runs[-1]["last"] == k - 1 and runs[-1]["executed"] == i["executed"]:
            run = runs[-1]
        else:
            run = {"first": k, "executed": i["executed"], "samples": 0, "instrs": []}
            runs.append(run)
        run["last"] = k
        run["samples"] += i["samples"]
        run["instrs"].append(i)
    for run in sorted(runs, key=lambda r: -r["samples"])[:top]:
        hot = sorted(run["instrs"], key=lambda i: -i["samples"])[:3]
        first, last = run["instrs"][0]["address"], run["instrs"][-1]["address"]
        print(f"{run['samples']:6d} x{run['executed']} {first[-5:]}-{last[-5:]} "
              f"({len(run['instrs'])} instrs): "
              + " | ".join(f"{i['samples']} {i['sass'][:56]}" for i in hot))


def self_test():
    """A made-up source page: a loop of two instructions run 8 times per
    block, per-block code run once, the producer's wait; the groups, the
    shares, the runs and their reasons must come out as built."""
    import contextlib
    import io
    import os
    import tempfile
    header = ["Address", "Source", "Warp Stall Sampling (All Samples)",
              "Instructions Executed", "stall_wait", "stall_long_sb",
              "stall_wait (Not Issued)"]
    rows = [["0x10", "HGMMA.64x128x16", "60", "800", "50", "10", "0"],
            ["0x20", "MUFU.EX2 R1, R1", "20", "800", "20", "0", "0"],
            ["0x30", "LDG.E R3, [R2]", "5", "100", "0", "5", "0"],
            ["0x40", "STS [R4], R3", "10", "100", "0", "10", "0"],
            ["0x50", "@!P0 BRA 0x50", "5", "7", "5", "0", "0"],
            ["0x60", "EXIT", "-", "1", "", "", ""]]
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "k.csv")
        with open(path, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["Kernel Name", "k"])
            w.writerow(header)
            w.writerows(rows)
        instrs = load(path)
        failures = []

        def check(what, ok):
            print(("ok   " if ok else "FAIL ") + what)
            if not ok:
                failures.append(what)

        check("rows without samples are skipped", len(instrs) == 5)
        check("reasons read without the not-issued columns",
              instrs[2]["reasons"] == {"wait": 0, "long_sb": 5})
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            by_execution_count(instrs, 10)
        lines = out.getvalue().splitlines()
        check("100 samples in all", lines[0] == "100 stall samples")
        check("the loop's group first, 80%",
              lines[2].split("|")[0].strip() == "800" and "80.0%" in lines[2])
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            runs_of(instrs, {100}, 5)
        text = out.getvalue()
        check("the per-block run: 15 samples, both instructions",
              "15 x100 0x30-0x40 (2 instrs)" in text)
        check("its reasons: long_sb 100%", "long_sb 100%" in text)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            in_loop_iterations(instrs, 800, 100, 10)
        text = out.getvalue()
        check("8 iterations per block of 10 samples each",
              text.startswith("8.00 loop iterations per block, 10 samples each"))
        check("the per-block code: 1.5 iterations' worth",
              "       100 |      15 | 1.50" in text)
    if failures:
        sys.exit(f"{len(failures)} check(s) failed")


def main():
    if "--self-test" in sys.argv[1:]:
        self_test()
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv", help="ncu --page source --csv --print-source sass output (.gz or not)")
    ap.add_argument("--execs", help="comma-separated execution counts to list runs of")
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--loop", type=int,
                    help="execution count of the loop's instructions (with --block)")
    ap.add_argument("--block", type=int,
                    help="execution count of the once-per-block code (with --loop)")
    args = ap.parse_args()
    instrs = load(args.csv)
    if not instrs:
        sys.exit(f"{args.csv}: no instructions with stall samples (was SourceCounters collected?)")
    if (args.loop is None) != (args.block is None):
        ap.error("--loop and --block go together")
    if args.loop is not None:
        if args.block <= 0 or args.loop <= 0:
            ap.error("--loop and --block are execution counts above 0")
        in_loop_iterations(instrs, args.loop, args.block, args.top)
    elif args.execs:
        runs_of(instrs, {int(x) for x in args.execs.split(",")}, args.top)
    else:
        by_execution_count(instrs, args.top)


if __name__ == "__main__":
    main()
