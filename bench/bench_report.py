"""The attention benchmark's results as a markdown table and as JSON.

Why: the sweep (attention_bench.py) measures; this module only formats, so
its rules (TFLOP/s, flashjit's ratio to each peer, n/a with a reason, a
loud mark on a failed check) can be tested without a GPU or torch.
"""

import json
import math
import re

from self_check import Checks

FLASHJIT = "flashjit"
PEERS = ["sdpa-flash", "sdpa-cudnn", "sdpa-efficient", "flex"]
BACKENDS = [FLASHJIT] + PEERS
PEER_TITLES = {
    "sdpa-flash": "SDPA flash",
    "sdpa-cudnn": "SDPA cuDNN",
    "sdpa-efficient": "SDPA efficient",
    "flex": "FlexAttention",
}


def forward_flops(batch, heads, seqlen, head_dim, causal):
    """FlashAttention's convention: 4*b*h*s*s*d, half when causal."""
    flops = 4 * batch * heads * seqlen * seqlen * head_dim
    return flops // 2 if causal else flops


def tflops(flops, ms):
    return flops / (ms * 1e-3) / 1e12


def slug(name):
    """'NVIDIA H100 80GB HBM3' -> 'nvidia-h100-80gb-hbm3' (a file name)."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "unknown-gpu"


def _cell_tflops(result):
    if result is None:
        return "–"  # not asked for
    if "tflops" in result:
        return f"{result['tflops']:.1f}"
    return "n/a"


def _ratio(point, peer):
    mine, theirs = point["results"].get(FLASHJIT), point["results"].get(peer)
    if mine and theirs and "tflops" in mine and "tflops" in theirs and theirs["tflops"] > 0:
        return f"{mine['tflops'] / theirs['tflops']:.2f}x"
    return "n/a" if theirs is not None else "–"


def _cell_check(check):
    if not check:
        return "n/a"
    if "error" in check:
        return "n/a"
    text = f"{check['rel_err']:.1e} / {check['max_abs_err']:.1e}"
    if "lse_max_abs_err" in check:
        text += f", lse {check['lse_max_abs_err']:.1e}"
    return text if check["ok"] else f"**MISMATCH** {text}"


def table(points, peers=PEERS):
    """One row per (head dim, causal, seqlen): TFLOP/s of every backend,
    flashjit's ratio to each peer, and flashjit's error against SDPA."""
    head = (["head dim", "causal", "seqlen", "batch x heads", "flashjit"]
            + [PEER_TITLES[p] for p in peers]
            + [f"vs {PEER_TITLES[p]}" for p in peers]
            + ["error vs SDPA: rel / max abs"])
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for p in points:
        row = [str(p["head_dim"]), "yes" if p["causal"] else "no", str(p["seqlen"]),
               f"{p['batch']} x {p['heads']}", _cell_tflops(p["results"].get(FLASHJIT))]
        row += [_cell_tflops(p["results"].get(peer)) for peer in peers]
        row += [_ratio(p, peer) for peer in peers]
        row.append(_cell_check(p.get("check")))
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def unavailable_notes(points):
    """'backend: reason (where)' once per distinct reason."""
    seen = {}
    for p in points:
        where = f"d{p['head_dim']}{' causal' if p['causal'] else ''} s={p['seqlen']}"
        entries = list(p["results"].items())
        flashjit_ran = "error" not in (p["results"].get(FLASHJIT) or {})
        if p.get("check") and "error" in p["check"] and flashjit_ran:
            entries.append(("check", p["check"]))  # else flashjit's own note says why
        for backend, result in entries:
            if result and "error" in result:
                seen.setdefault((backend, result["error"]), []).append(where)
    notes = []
    for (backend, reason), wheres in seen.items():
        at = wheres[0] if len(wheres) == 1 else f"{len(wheres)} points, first {wheres[0]}"
        notes.append(f"- {backend}: {reason} ({at})")
    return notes


def mismatches(points):
    return [p for p in points if p.get("check") and p["check"].get("ok") is False]


def markdown(meta, points, peers=PEERS):
    """The whole results page: where it ran, how, the table, the notes."""
    out = [f"# flashjit forward attention vs peers on {meta.get('gpu', 'unknown GPU')}", ""]
    facts = [
        ("GPU", meta.get("gpu")), ("driver", meta.get("driver")),
        ("torch", meta.get("torch")), ("CUDA (torch)", meta.get("cuda")),
        ("cuDNN", meta.get("cudnn")), ("Triton", meta.get("triton")),
        ("flashjit", meta.get("flashjit")),
        ("flashjit tuning database", meta.get("tuning_db")), ("date (UTC)", meta.get("date")),
    ]
    out += [f"- {k}: {v}" for k, v in facts if v]
    out += ["", "Command:", "", "```sh", meta.get("command", ""), "```", ""]
    out += [
        f"Forward pass, {meta.get('dtype', 'bf16')}, layout {meta.get('layout', 'bhsd')}, "
        f"batch x seqlen = {meta.get('total_tokens')}, hidden = {meta.get('hidden')} "
        "(heads = hidden / head dim). TFLOP/s = 4·b·h·s²·d (half when causal) over the "
        "median time of back-to-back launches between CUDA events, every backend timed "
        "in turn in each round. A ratio is flashjit's "
        "TFLOP/s over the peer's. The error columns compare flashjit's output with "
        f"SDPA's ({meta.get('tolerance', '')}).",
        "",
        table(points, peers),
        "",
    ]
    bad = mismatches(points)
    if bad:
        out += [f"**{len(bad)} point(s) where flashjit's output does not match SDPA's.**", ""]
    notes = unavailable_notes(points)
    if notes:
        out += ["Not available:", ""] + notes + [""]
    kernels = meta.get("flashjit_kernels") or {}
    if kernels:
        out += ["flashjit kernels:", ""]
        out += [f"- {name}: {k['config']}, first compile {k['compile_ms']:.0f} ms"
                for name, k in sorted(kernels.items())]
        out.append("")
    return "\n".join(out)


def to_json(meta, points):
    def clean(x):  # NaN and inf are not JSON
        if isinstance(x, float) and not math.isfinite(x):
            return None
        if isinstance(x, dict):
            return {k: clean(v) for k, v in x.items()}
        if isinstance(x, list):
            return [clean(v) for v in x]
        return x
    return json.dumps(clean({"meta": meta, "points": points}), indent=2)


def self_test(out=print):
    """Checks the formatting rules on made-up results. Returns failures."""
    check = Checks(out)

    check("FLOPs of d128 s4096 b4 h16", forward_flops(4, 16, 4096, 128, False) == 4 * 4 * 16 * 4096 ** 2 * 128)
    check("causal FLOPs are half", forward_flops(4, 16, 4096, 128, True) * 2 == forward_flops(4, 16, 4096, 128, False))
    check("TFLOP/s", abs(tflops(2e12, 1000.0) - 2.0) < 1e-12)
    check("GPU name as a file name", slug("NVIDIA H100 80GB HBM3") == "nvidia-h100-80gb-hbm3", slug("NVIDIA H100 80GB HBM3"))
    points = [
        {"head_dim": 128, "causal": True, "seqlen": 1024, "batch": 16, "heads": 16,
         "results": {"flashjit": {"ms": 2.0, "tflops": 100.0},
                     "sdpa-flash": {"ms": 1.0, "tflops": 200.0},
                     "sdpa-cudnn": {"error": "RuntimeError: No available kernel"},
                     "sdpa-efficient": {"ms": 1.0, "tflops": 50.0},
                     "flex": {"error": "RuntimeError: No available kernel"}},
         "check": {"reference": "sdpa-flash", "rel_err": 3e-3, "max_abs_err": 7.8e-3, "ok": True}},
        {"head_dim": 64, "causal": False, "seqlen": 2048, "batch": 8, "heads": 32,
         "results": {"flashjit": {"error": "compile error: boom"},
                     "sdpa-flash": {"ms": 1.0, "tflops": 300.0}},
         "check": {"reference": "sdpa-flash", "rel_err": 0.5, "max_abs_err": 2.0, "ok": False}},
    ]
    text = table(points)
    rows = text.splitlines()
    check("a header, a rule and one row per point", len(rows) == 4, str(len(rows)))
    first = [c.strip() for c in rows[2].strip("|").split("|")]
    check("flashjit's TFLOP/s", first[4] == "100.0", first[4])
    check("ratio to SDPA flash is 0.50x", "0.50x" in first, str(first))
    check("ratio to SDPA efficient is 2.00x", "2.00x" in first, str(first))
    check("an unavailable peer is n/a", first[6] == "n/a", first[6])
    second = rows[3]
    check("a failed check is flagged", "**MISMATCH**" in second, second)
    check("a peer not run is a dash", "–" in second, second)
    notes = unavailable_notes(points)
    check("one note per backend and reason", len(notes) == 3, str(notes))
    check("a note names the backend and the point",
          any(n.startswith("- sdpa-cudnn: RuntimeError: No available kernel (d128 causal s=1024)") for n in notes), str(notes))
    page = markdown({"gpu": "Test GPU", "command": "python3 bench/attention_bench.py", "total_tokens": 16384,
                     "hidden": 2048}, points)
    check("the page names the GPU and the command", "Test GPU" in page and "python3 bench/attention_bench.py" in page)
    check("the page counts the mismatches", "1 point(s)" in page)
    data = json.loads(to_json({"x": float("nan")}, points))
    check("NaN becomes null in JSON", data["meta"]["x"] is None)
    return len(check.failed)
