"""The `kolorun` console script of a pip install: runs the kolorun binary
built into the package (kolo/bin/kolorun) with the same arguments."""
import os
import sys


def main():
    exe = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "kolorun")
    if not os.path.exists(exe):
        sys.exit(f"kolorun: {exe} is missing (this kolo was not installed with pip; "
                 "use build/tools/kolorun/kolorun)")
    os.execv(exe, [exe] + sys.argv[1:])


if __name__ == "__main__":
    main()
