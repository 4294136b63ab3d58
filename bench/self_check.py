"""A tally of named checks for the benchmark's --self-test.

Why: the self-tests of the bindings, the report and the sweep plan run
where neither torch nor a GPU is, as one ctest; each prints one line per
check and counts what failed, the same way.
"""


class Checks:
    def __init__(self, out=print):
        self.out, self.failed = out, []

    def __call__(self, what, ok, detail=""):
        """Prints 'ok' or 'FAIL' and the check's name (and, on failure,
        `detail`: what was seen instead)."""
        suffix = f": {detail}" if detail and not ok else ""
        self.out(f"{'ok  ' if ok else 'FAIL'} {what}{suffix}")
        if not ok:
            self.failed.append(what)
        return ok
