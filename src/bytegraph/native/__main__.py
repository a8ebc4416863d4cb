"""``python -m bytegraph.native build [--force]`` compiles the native guard checks;
``python -m bytegraph.native status`` says whether guards will use them."""

import argparse
import sys

from . import build, load, module_path, reload, status


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bytegraph.native", description=__doc__)
    parser.add_argument("command", choices=["build", "status"])
    parser.add_argument("--force", action="store_true", help="rebuild even when up to date")
    args = parser.parse_args(argv)
    if args.command == "build":
        try:
            build(force=args.force)
        except RuntimeError as e:
            print(e, file=sys.stderr)
            print("bytegraph will use its pure-Python guard checks instead.", file=sys.stderr)
            return 1
    reload()
    print(f"native guard checks: {status()}")
    if load() is None:
        return 1 if args.command == "build" else 0
    print(f"  module: {module_path()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
