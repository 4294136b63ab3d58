"""The variants benchmark's report: its Markdown table and goal lines.

Why: variants_bench.py runs the sweep and keeps its rows as JSON; how a
row reads in a table is one job apart from timing it. "tile rate/dense"
is the variant's rate on the tiles it computes over the dense kernel's of
the same shape; "tile rate/dense rows" the same over a dense kernel whose
rows are as long as the variant's (variants_sweep.Variant.row_keys).
"""


def table(rows):
    head = ["variant", "shape", "flashjit ms", "flex ms", "flashjit TFLOP/s", "flex TFLOP/s",
            "flashjit/flex", "flashjit dense TFLOP/s", "variant/dense", "tile rate/dense",
            "tile rate/dense rows", "time/dense", "check"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    ratio = lambda a, b: a["tflops"] / b["tflops"] if "tflops" in a and "tflops" in b else None  # noqa: E731
    fmt = lambda x, spec=".2f": "n/a" if x is None else format(x, spec)  # noqa: E731
    for r in rows:
        fj, fx, dn = (r["results"].get(n, {}) for n in ("flashjit", "flex", "flashjit-dense"))
        c = r["check"]
        check = (f"{'ok' if c['ok'] else 'FAILED'} (rel {c['rel_err']:.1e}, max abs {c['max_abs_err']:.1e})"
                 if "ok" in c else f"n/a ({c['error']})")
        lines.append("| " + " | ".join([
            r["variant"], r["shape"], "unsupported" if "unsupported" in fj else fmt(fj.get("ms"), ".3f"),
            fmt(fx.get("ms"), ".3f"), fmt(fj.get("tflops"), ".1f"), fmt(fx.get("tflops"), ".1f"),
            fmt(ratio(fj, fx)), fmt(dn.get("tflops"), ".1f"), fmt(ratio(fj, dn)),
            fmt(r.get("tile_rate_vs_dense")), fmt(r.get("tile_rate_vs_dense_rows")),
            fmt(r.get("time_vs_dense")), check]) + " |")
    return "\n".join(lines)


def goal_lines(rows):
    """One line per row held to a time/dense goal."""
    lines = []
    for r in rows:
        if "goal_time_vs_dense" in r:
            goal, got = r["goal_time_vs_dense"], r.get("time_vs_dense")
            verdict = ("n/a" if got is None else f"{got:.3f}, {'met' if got <= goal else 'NOT met'}")
            lines.append(f"- {r['variant']} {r['shape']}: flashjit time/dense <= {goal:g}: {verdict}")
    return lines
