"""What the client workflows share: a comparison that prints what differed and exits 1."""
import sys


def check(got, want, what):
    if got != want:
        print(f"MISMATCH {what}: got {got!r}, want {want!r}")
        sys.exit(1)
